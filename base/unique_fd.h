#pragma once

#include <unistd.h>

#include <utility>

namespace stagehand {

// A move-only owner of a file descriptor; closes it on destruction.
// Thread-compatible. Open descriptors with O_CLOEXEC.
class UniqueFd {
 public:
  UniqueFd() = default;

  explicit UniqueFd(int fd) : fd_(fd) {}

  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}

  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset(other.Release());
    }
    return *this;
  }

  ~UniqueFd() { Reset(); }

  int Get() const { return fd_; }

  bool Valid() const { return fd_ >= 0; }

  explicit operator bool() const { return Valid(); }

  // Gives up ownership and returns the descriptor.
  int Release() { return std::exchange(fd_, -1); }

  void Reset(int fd = -1) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace stagehand
