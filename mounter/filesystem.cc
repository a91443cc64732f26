#include "mounter/filesystem.h"

#include <chrono>
#include <vector>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>

#include "base/subprocess.h"

namespace stagehand::mounter {
namespace {

using std::chrono::minutes;

// Generous: these run on volumes of any size, and killing a repair midway is worse than waiting.
constexpr minutes kFormatTimeout{10};
constexpr minutes kCheckTimeout{30};
constexpr minutes kGrowTimeout{30};

absl::Status ValidateArgs(std::string_view op, const std::string& device, std::string_view fstype) {
  if (!IsSupportedFsType(fstype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(op), " '", device, "': unsupported filesystem type '", ToAbsl(fstype), "'"));
  }
  // An absolute path cannot be mistaken for an option by the tools.
  if (device.empty() || device.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(op), ": device '", device, "' is not an absolute path"));
  }
  return absl::OkStatus();
}

std::string Trimmed(const std::string& output) {
  return std::string(absl::StripAsciiWhitespace(output));
}

// Runs `argv`; a non-zero exit becomes Internal with the tool's output.
absl::Status RunTool(const std::vector<std::string>& argv, minutes timeout) {
  RunOptions options;
  options.timeout = timeout;
  SH_ASSIGN_OR_RETURN(const ProcessResult r, RunProcess(argv, options));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("'", ArgvToString(argv), "' exited with ", r.exit_code,
                                            ": ", Trimmed(r.output)));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsSupportedFsType(std::string_view fstype) {
  return fstype == "ext4" || fstype == "xfs";
}

absl::Status Format(const std::string& device, std::string_view fstype) {
  SH_RETURN_IF_ERROR(ValidateArgs("format", device, fstype));
  if (fstype == "ext4") {
    // -F: the device is not a partition. nodiscard: a fresh iSCSI LUN is already unallocated,
    // and discarding a large one can take minutes. lazy_itable_init: the kernel zeroes inode
    // tables in the background after mount. lazy_journal_init: the journal is not zeroed first
    // (32 MiB through the whole data path, most of a fresh stage). That is safe here because
    // metadata_csum (-O; Debian's default) makes jbd2 checksum every journal block with a seed
    // from the new filesystem's UUID, so replay after a crash rejects any stale block, and we
    // only format LUNs that carry no signature and read as zeros at the start.
    return RunTool({"mkfs.ext4", "-F", "-q", "-O", "metadata_csum", "-E",
                    "nodiscard,lazy_itable_init=1,lazy_journal_init=1", device},
                   kFormatTimeout);
  }
  // -K: no discard. No -f: mkfs.xfs refuses an existing signature on its own.
  return RunTool({"mkfs.xfs", "-q", "-K", device}, kFormatTimeout);
}

absl::Status Check(const std::string& device, std::string_view fstype) {
  SH_RETURN_IF_ERROR(ValidateArgs("check", device, fstype));
  if (fstype == "xfs") {
    return absl::OkStatus();  // xfs_repair is for humans; mounting replays the log.
  }
  RunOptions options;
  options.timeout = kCheckTimeout;
  const std::vector<std::string> argv = {"e2fsck", "-p", device};
  SH_ASSIGN_OR_RETURN(const ProcessResult r, RunProcess(argv, options));
  // e2fsck(8): 0 clean, 1 errors corrected, 2 corrected and "reboot" (only meaningful for a
  // mounted root fs), 4 errors left uncorrected, 8 operational error, 16 usage, 32 cancelled.
  if (r.exit_code >= 0 && r.exit_code <= 2) {
    return absl::OkStatus();
  }
  if (r.exit_code < 128 && (r.exit_code & 4) != 0) {  // Exit codes are OR-ed bits.
    return absl::FailedPreconditionError(
        absl::StrCat("filesystem on '", device,
                     "' has errors that e2fsck -p could not fix: ", Trimmed(r.output)));
  }
  return absl::FailedPreconditionError(absl::StrCat("'", ArgvToString(argv), "' exited with ",
                                                    r.exit_code, ": ", Trimmed(r.output)));
}

absl::Status Grow(const std::string& device, const std::string& mount_path,
                  std::string_view fstype) {
  SH_RETURN_IF_ERROR(ValidateArgs("grow", device, fstype));
  if (fstype == "ext4") {
    return RunTool({"resize2fs", device}, kGrowTimeout);
  }
  if (mount_path.empty() || mount_path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "grow '", device, "': xfs needs the absolute mount path, got '", mount_path, "'"));
  }
  return RunTool({"xfs_growfs", mount_path}, kGrowTimeout);
}

}  // namespace stagehand::mounter
