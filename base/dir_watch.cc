#include "base/dir_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::StatusOr<DirWatch> DirWatch::Create() {
  UniqueFd inotify(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify) {
    return ErrnoStatus(errno, "inotify_init1");
  }
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake) {
    return ErrnoStatus(errno, "eventfd");
  }
  return DirWatch(std::move(inotify), std::move(wake));
}

absl::StatusOr<int> DirWatch::Add(const std::string& path, uint32_t mask) {
  const int wd = inotify_add_watch(inotify_.Get(), path.c_str(), mask);
  if (wd < 0) {
    return ErrnoStatus(errno, absl::StrCat("watch '", path, "'"));
  }
  return wd;
}

void DirWatch::Remove(int wd) {
  if (wd >= 0) {
    (void)inotify_rm_watch(inotify_.Get(), wd);
  }
}

absl::Status DirWatch::Wait(std::optional<std::chrono::milliseconds> timeout) {
  std::array<pollfd, 2> fds{{{inotify_.Get(), POLLIN, 0}, {wake_.Get(), POLLIN, 0}}};
  const int timeout_ms = timeout ? static_cast<int>(std::max<int64_t>(timeout->count(), 0)) : -1;
  if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
    return errno == EINTR ? absl::OkStatus() : ErrnoStatus(errno, "poll on inotify");
  }
  if ((fds[1].revents & POLLIN) != 0) {
    uint64_t count = 0;
    (void)read(wake_.Get(), &count, sizeof(count));
  }
  return absl::OkStatus();
}

std::vector<DirWatch::Event> DirWatch::Read() {
  alignas(inotify_event) std::array<char, 16384> buffer{};
  std::vector<Event> events;
  const ssize_t n = read(inotify_.Get(), buffer.data(), buffer.size());
  for (ssize_t offset = 0; offset < n;) {
    const auto* raw = reinterpret_cast<const inotify_event*>(buffer.data() + offset);
    offset += static_cast<ssize_t>(sizeof(inotify_event) + raw->len);
    events.push_back({raw->wd, raw->mask, raw->cookie, raw->len > 0 ? raw->name : ""});
  }
  return events;
}

void DirWatch::Wake() const {
  const uint64_t one = 1;
  (void)write(wake_.Get(), &one, sizeof(one));
}

}  // namespace stagehand
