#include "mounter/blkid_block_probe.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include <absl/strings/str_cat.h>

#include "base/c_handle.h"
#include "base/unique_fd.h"
#include "mounter/blkid_handles.h"
#include "mounter/volume_stats.h"

namespace stagehand::mounter {
namespace {

constexpr int64_t kZeroCheckBytes = int64_t{2} << 20;
constexpr size_t kAlignment = 4096;  // Satisfies O_DIRECT for 512- and 4096-byte sectors.
constexpr size_t kChunkBytes = size_t{1} << 20;

using AlignedBuffer = CHandle<std::byte, &std::free>;

absl::Status FlushBufferCache(const std::string& device) {
  UniqueFd fd(open(device.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", device, "'"));
  }
  if (ioctl(fd.Get(), BLKFLSBUF, 0) != 0) {
    return ErrnoStatus(errno, absl::StrCat("BLKFLSBUF '", device, "'"));
  }
  return absl::OkStatus();
}

std::string LookupValue(blkid_probe pr, const char* name) {
  const char* data = nullptr;
  size_t len = 0;
  if (blkid_probe_lookup_value(pr, name, &data, &len) != 0 || data == nullptr) {
    return "";
  }
  return {data};  // `len` counts the terminating NUL.
}

// What libblkid finds on `device`, or nullopt if it finds no signature at all.
absl::StatusOr<std::optional<ProbeResult>> ProbeSignatures(const std::string& device) {
  errno = 0;
  BlkidProbe pr(blkid_new_probe_from_filename(device.c_str()));
  if (!pr) {
    return ErrnoStatus(errno != 0 ? errno : EIO, absl::StrCat("blkid open '", device, "'"));
  }
  if (blkid_probe_enable_superblocks(pr.get(), 1) != 0 ||
      blkid_probe_set_superblocks_flags(
          pr.get(), BLKID_SUBLKS_TYPE | BLKID_SUBLKS_UUID | BLKID_SUBLKS_USAGE) != 0 ||
      blkid_probe_enable_partitions(pr.get(), 1) != 0) {
    return absl::InternalError(absl::StrCat("blkid setup for '", device, "' failed"));
  }
  errno = 0;
  const int rc = blkid_do_safeprobe(pr.get());
  if (rc == 1) {  // BLKID_PROBE_NONE
    return std::optional<ProbeResult>();
  }
  ProbeResult r;
  if (rc == -2) {  // BLKID_PROBE_AMBIGUOUS: several signatures, e.g. leftovers of an old fs.
    r.kind = ProbeResult::Kind::kOtherSignature;
    r.type = "ambivalent";
    return r;
  }
  if (rc != 0) {
    return ErrnoStatus(errno != 0 ? errno : EIO, absl::StrCat("blkid probe '", device, "'"));
  }
  const std::string type = LookupValue(pr.get(), "TYPE");
  const std::string pttype = LookupValue(pr.get(), "PTTYPE");
  if (!type.empty()) {
    // USAGE is "filesystem", "raid" (LVM2_member, linux_raid_member), "crypto" or "other".
    r.kind = LookupValue(pr.get(), "USAGE") == "filesystem" ? ProbeResult::Kind::kFilesystem
                                                            : ProbeResult::Kind::kOtherSignature;
    r.type = type;
    r.uuid = LookupValue(pr.get(), "UUID");
  } else if (!pttype.empty()) {
    r.kind = ProbeResult::Kind::kPartitionTable;
    r.type = pttype;
  } else {
    r.kind = ProbeResult::Kind::kOtherSignature;
    r.type = "unknown";
  }
  return r;
}

// True if the first `max_bytes` of `device` (or all of it, if smaller) are zero. Reads with
// O_DIRECT where the filesystem supports it; a regular file's page cache is authoritative anyway,
// and a block device's was flushed before.
absl::StatusOr<bool> LeadingBytesAreZero(const std::string& device, int64_t max_bytes) {
  SH_ASSIGN_OR_RETURN(const int64_t size, BlockDeviceSize(device));
  const int64_t len = std::min(size, max_bytes);
  UniqueFd fd(open(device.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  if (!fd && errno == EINVAL) {
    fd.Reset(open(device.c_str(), O_RDONLY | O_CLOEXEC));
  }
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", device, "'"));
  }
  AlignedBuffer buf(static_cast<std::byte*>(std::aligned_alloc(kAlignment, kChunkBytes)));
  if (!buf) {
    return absl::ResourceExhaustedError("aligned_alloc");
  }
  int64_t offset = 0;
  while (offset < len) {
    const int64_t remaining = len - offset;
    const size_t aligned_remaining =
        (static_cast<size_t>(remaining) + kAlignment - 1) / kAlignment * kAlignment;
    const ssize_t n = pread(fd.Get(), buf.get(), std::min(kChunkBytes, aligned_remaining), offset);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, absl::StrCat("read '", device, "' at ", offset));
    }
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("unexpected end of '", device, "' at ", offset, " of ", size, " bytes"));
    }
    const std::byte* begin = buf.get();
    const std::byte* end = begin + std::min<int64_t>(n, remaining);
    if (std::any_of(begin, end, [](std::byte b) { return b != std::byte{0}; })) {
      return false;
    }
    offset += n;
  }
  return true;
}

}  // namespace

absl::StatusOr<ProbeResult> BlkidBlockProbe::Probe(const std::string& device) {
  struct stat st = {};
  if (stat(device.c_str(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("stat '", device, "'"));
  }
  if (!S_ISBLK(st.st_mode) && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", device, "' is neither a block device nor a regular file"));
  }
  if (S_ISBLK(st.st_mode)) {
    SH_RETURN_IF_ERROR(FlushBufferCache(device));
  }
  SH_ASSIGN_OR_RETURN(std::optional<ProbeResult> found, ProbeSignatures(device));
  if (found) {
    return *std::move(found);
  }
  SH_ASSIGN_OR_RETURN(const bool zero, LeadingBytesAreZero(device, kZeroCheckBytes));
  ProbeResult r;
  r.kind = zero ? ProbeResult::Kind::kBlank : ProbeResult::Kind::kNotZeroed;
  return r;
}

}  // namespace stagehand::mounter
