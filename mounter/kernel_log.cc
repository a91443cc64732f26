#include "mounter/kernel_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <deque>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

namespace stagehand::mounter {

KernelLogWindow KernelLogWindow::Open() {
  UniqueFd fd(open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd && lseek(fd.Get(), 0, SEEK_END) < 0) {
    fd.Reset();
  }
  return KernelLogWindow(std::move(fd));
}

std::string KernelLogWindow::KernelName(const std::string& device) {
  std::array<char, PATH_MAX> resolved{};
  const std::string path =
      realpath(device.c_str(), resolved.data()) != nullptr ? resolved.data() : device;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string KernelLogWindow::RecordText(std::string_view record) {
  const size_t semicolon = record.find(';');
  if (semicolon == std::string_view::npos) {
    return "";
  }
  std::string_view text = record.substr(semicolon + 1);
  return std::string(text.substr(0, text.find('\n')));
}

std::vector<std::string> KernelLogWindow::MessagesAbout(const std::string& device, size_t max) {
  std::deque<std::string> found;
  if (!fd_ || max == 0) {
    return {};
  }
  const std::string name = KernelName(device);
  const std::string in_parens = absl::StrCat("(", name, ")");
  const std::string with_colon = absl::StrCat(name, ":");
  // One record per read; a record is at most about 8 KiB (the kernel's limit is 1024 bytes of
  // text plus its dictionary).
  std::array<char, 8192> buffer{};
  while (true) {
    const ssize_t n = read(fd_.Get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EPIPE) {
      continue;  // Records overwritten before we read them: go on with the next.
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;  // EAGAIN: nothing more (or the log is unreadable after all).
    }
    std::string text = RecordText(std::string_view(buffer.data(), static_cast<size_t>(n)));
    if (absl::StrContains(text, in_parens) || absl::StartsWith(text, with_colon) ||
        absl::StrContains(text, absl::StrCat(" ", with_colon))) {
      found.push_back(std::move(text));
      if (found.size() > max) {
        found.pop_front();
      }
    }
  }
  return {found.begin(), found.end()};
}

}  // namespace stagehand::mounter
