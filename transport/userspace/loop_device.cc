#include "transport/userspace/loop_device.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "base/file_io.h"
#include "base/unique_fd.h"

namespace stagehand::transport::userspace {
namespace {

std::string DeviceName(const std::string& device) {
  const size_t slash = device.rfind('/');
  return slash == std::string::npos ? device : device.substr(slash + 1);
}

// Whether `device` is attached to `file`. The backing file the kernel shows is the path as the
// reader's mount namespace sees it: from another namespace (a loop attached by the agent's
// previous container, whose mounts are gone from view) only the part within the file's own
// mount is left ("/lun"). So a path that is a tail of `file` also matches when the name recorded
// at attach time (lo_file_name, which AttachLoopDevice sets to `file`) is `file`.
bool BackedBy(const std::string& device, const std::string& file) {
  auto backing = LoopBackingFile(device);
  if (!backing) {
    return false;
  }
  // The kernel appends " (deleted)" when the file went away (e.g. the FUSE mount died).
  std::string shown(absl::StripSuffix(*backing, " (deleted)"));
  if (shown == file) {
    return true;
  }
  if (shown.empty() || shown.front() != '/' || !file.ends_with(shown)) {
    return false;
  }
  UniqueFd loop(open(device.c_str(), O_RDONLY | O_CLOEXEC));
  loop_info64 info{};
  if (!loop || ioctl(loop.Get(), LOOP_GET_STATUS64, &info) != 0) {
    return false;
  }
  const std::string recorded(
      reinterpret_cast<const char*>(info.lo_file_name),
      strnlen(reinterpret_cast<const char*>(info.lo_file_name), LO_NAME_SIZE));
  return recorded == file.substr(0, LO_NAME_SIZE - 1);
}

// How long a detach waits for other openers of the device to close it, and how often it looks.
constexpr auto kDetachGrace = std::chrono::seconds(2);
constexpr auto kDetachPoll = std::chrono::milliseconds(20);

// The processes that have `device` open (from /proc/<pid>/fd), for an error message.
std::vector<int> OpenersOf(const std::string& device) {
  std::vector<int> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) {
    return pids;
  }
  while (const dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) {
      continue;
    }
    const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) {
      continue;
    }
    while (const dirent* f = readdir(fds)) {
      std::array<char, 256> target{};
      const std::string link = absl::StrCat(fd_dir, "/", f->d_name);
      const ssize_t n = readlink(link.c_str(), target.data(), target.size() - 1);
      if (n > 0 && std::string_view(target.data(), static_cast<size_t>(n)) == device) {
        pids.push_back(pid);
        break;
      }
    }
    closedir(fds);
  }
  closedir(proc);
  return pids;
}

}  // namespace

std::optional<std::string> LoopBackingFile(const std::string& device) {
  auto text =
      ReadFileToString(absl::StrCat("/sys/block/", DeviceName(device), "/loop/backing_file"));
  if (!text.ok()) {
    return std::nullopt;
  }
  return std::string(absl::StripTrailingAsciiWhitespace(*text));
}

LoopAttachment CheckLoopAttachment(const std::string& device, const std::string& file) {
  // A record without the file (none is written so) can only say whether anything is attached.
  if (file.empty() ? !LoopBackingFile(device).has_value() : !BackedBy(device, file)) {
    return LoopAttachment::kGone;
  }
  auto autoclear =
      ReadFileToString(absl::StrCat("/sys/block/", DeviceName(device), "/loop/autoclear"));
  return autoclear.ok() && absl::StripAsciiWhitespace(*autoclear) == "1"
             ? LoopAttachment::kDetaching
             : LoopAttachment::kAttached;
}

std::optional<LoopActivity> ReadLoopActivity(const std::string& device) {
  const std::string dir = absl::StrCat("/sys/block/", DeviceName(device));
  auto inflight = ReadFileToString(dir + "/inflight");
  auto stat = ReadFileToString(dir + "/stat");
  if (!inflight.ok() || !stat.ok()) {
    return std::nullopt;
  }
  auto numbers = [](const std::string& text) {
    std::vector<uint64_t> out;
    for (absl::string_view field : absl::StrSplit(text, ' ', absl::SkipWhitespace())) {
      uint64_t n = 0;
      out.push_back(absl::SimpleAtoi(field, &n) ? n : 0);
    }
    return out;
  };
  LoopActivity a;
  for (uint64_t n : numbers(*inflight)) {
    a.in_flight += n;
  }
  // Fields of /sys/block/<dev>/stat (Documentation/block/stat.rst): read I/Os 0, write I/Os 4,
  // discard I/Os 11 and flush requests 15 (the last two since kernels 4.18 and 5.5).
  const std::vector<uint64_t> fields = numbers(*stat);
  for (size_t i : {0, 4, 11, 15}) {
    if (i < fields.size()) {
      a.completed += fields[i];
    }
  }
  return a;
}

absl::StatusOr<std::string> AttachLoopDevice(const std::string& file, uint32_t block_size,
                                             bool read_only) {
  UniqueFd backing(open(file.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
  if (!backing) {
    return ErrnoStatus(errno, absl::StrCat("open LUN file '", file, "'"));
  }
  UniqueFd control(open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) {
    return ErrnoStatus(errno, "open /dev/loop-control");
  }
  // Another process may grab the same free device between GET_FREE and CONFIGURE: retry.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int index = ioctl(control.Get(), LOOP_CTL_GET_FREE);
    if (index < 0) {
      return absl::UnavailableError(absl::StrCat("no free loop device: ", ErrnoText(errno)));
    }
    const std::string device = absl::StrCat("/dev/loop", index);
    UniqueFd loop(open(device.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop) {
      return ErrnoStatus(errno, absl::StrCat("open '", device, "'"));
    }
    loop_config config{};
    config.fd = static_cast<uint32_t>(backing.Get());
    config.block_size = block_size;
    config.info.lo_flags = LO_FLAGS_DIRECT_IO | (read_only ? LO_FLAGS_READ_ONLY : 0);
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), file.c_str(), LO_NAME_SIZE - 1);
    if (ioctl(loop.Get(), LOOP_CONFIGURE, &config) == 0) {
      return device;
    }
    if (errno != EBUSY) {
      return ErrnoStatus(errno, absl::StrCat("configure '", device, "' over '", file, "'"));
    }
  }
  return absl::UnavailableError("could not claim a free loop device after 16 attempts");
}

absl::Status DetachLoopDevice(const std::string& device, const std::string& expected_backing_file) {
  if (!BackedBy(device, expected_backing_file)) {
    return absl::OkStatus();  // Detached already, or someone else's now.
  }
  UniqueFd loop(open(device.c_str(), O_RDWR | O_CLOEXEC));
  if (!loop) {
    return errno == ENOENT || errno == ENXIO
               ? absl::OkStatus()
               : ErrnoStatus(errno, absl::StrCat("open '", device, "'"));
  }
  if (ioctl(loop.Get(), LOOP_CLR_FD, 0) != 0 && errno != ENXIO) {
    return ErrnoStatus(errno, absl::StrCat("detach '", device, "'"));
  }
  loop.Reset();
  // Opened elsewhere, the device is only marked to detach at its last close (autoclear) and
  // stays attached: say so rather than report it gone (the session behind it must keep serving
  // whoever still has it). A short-lived opener (udev's probe after the unmount) is waited for.
  const auto deadline = std::chrono::steady_clock::now() + kDetachGrace;
  while (BackedBy(device, expected_backing_file)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::vector<int> openers = OpenersOf(device);
      return absl::FailedPreconditionError(absl::StrCat(
          "loop device ", device, " is still in use (",
          openers.empty() ? "by a filesystem mounted elsewhere, or lazily unmounted and still busy"
                          : absl::StrCat("open by pid ", absl::StrJoin(openers, ", pid ")),
          "): it detaches when its last user closes it; end that use, then retry"));
    }
    std::this_thread::sleep_for(kDetachPoll);
  }
  return absl::OkStatus();
}

absl::Status RefreshLoopCapacity(const std::string& device) {
  UniqueFd loop(open(device.c_str(), O_RDWR | O_CLOEXEC));
  if (!loop) {
    return ErrnoStatus(errno, absl::StrCat("open '", device, "'"));
  }
  if (ioctl(loop.Get(), LOOP_SET_CAPACITY, 0) != 0) {
    return ErrnoStatus(errno, absl::StrCat("resize '", device, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> FindLoopDevice(const std::string& file) {
  DIR* dir = opendir("/sys/block");
  if (dir == nullptr) {
    return ErrnoStatus(errno, "opendir /sys/block");
  }
  std::optional<std::string> found;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (!name.starts_with("loop")) {
      continue;
    }
    const std::string device = absl::StrCat("/dev/", name);
    if (BackedBy(device, file)) {
      found = device;
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace stagehand::transport::userspace
