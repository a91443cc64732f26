#include "session/counters_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include <absl/strings/str_cat.h>

#include "base/unique_fd.h"

namespace stagehand::session {

absl::StatusOr<CountersFile> CountersFile::Create(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("create '", path, "'"));
  }
  if (ftruncate(fd.Get(), sizeof(DataPathCounters)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("size '", path, "'"));
  }
  void* mapped =
      mmap(nullptr, sizeof(DataPathCounters), PROT_READ | PROT_WRITE, MAP_SHARED, fd.Get(), 0);
  if (mapped == MAP_FAILED) {
    return ErrnoStatus(errno, absl::StrCat("map '", path, "'"));
  }
  auto* counters = new (mapped) DataPathCounters();
  return CountersFile(counters);
}

CountersFile::CountersFile(CountersFile&& other) noexcept
    : counters_(std::exchange(other.counters_, nullptr)) {}

CountersFile& CountersFile::operator=(CountersFile&& other) noexcept {
  if (this != &other) {
    if (counters_ != nullptr) {
      munmap(counters_, sizeof(DataPathCounters));
    }
    counters_ = std::exchange(other.counters_, nullptr);
  }
  return *this;
}

CountersFile::~CountersFile() {
  if (counters_ != nullptr) {
    munmap(counters_, sizeof(DataPathCounters));
  }
}

void CountAdd(DataPathCounters* counters, uint64_t DataPathCounters::*field, uint64_t n) {
  if (counters != nullptr) {
    std::atomic_ref<uint64_t>(counters->*field).fetch_add(n, std::memory_order_relaxed);
  }
}

void Beat(DataPathCounters* counters) {
  if (counters != nullptr) {
    std::atomic_ref<uint64_t>(counters->heartbeat_ns)
        .store(MonotonicNowNs(), std::memory_order_relaxed);
  }
}

}  // namespace stagehand::session
