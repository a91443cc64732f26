#include "iscsi/datapath_counters.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include <absl/strings/str_cat.h>

#include "base/unique_fd.h"

namespace stagehand::iscsi {

static_assert(sizeof(DataPathCounters) % sizeof(uint64_t) == 0);

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

uint64_t MonotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000U + static_cast<uint64_t>(ts.tv_nsec);
}

void Beat(DataPathCounters* counters) {
  if (counters != nullptr) {
    std::atomic_ref<uint64_t>(counters->heartbeat_ns)
        .store(MonotonicNowNs(), std::memory_order_relaxed);
  }
}

std::optional<std::chrono::milliseconds> SinceLastBeat(const DataPathCounters& counters,
                                                       uint64_t now_ns) {
  if (counters.heartbeat_ns == 0) {
    return std::nullopt;
  }
  const uint64_t ago = now_ns > counters.heartbeat_ns ? now_ns - counters.heartbeat_ns : 0;
  return std::chrono::milliseconds(ago / 1'000'000U);
}

absl::StatusOr<DataPathCounters> ReadCounters(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  DataPathCounters counters;
  const ssize_t n = pread(fd.Get(), &counters, sizeof(counters), 0);
  if (n < 0) {
    return ErrnoStatus(errno, absl::StrCat("read '", path, "'"));
  }
  // Version 1 ended before the heartbeat.
  constexpr size_t kVersion1Size = offsetof(DataPathCounters, heartbeat_ns);
  const auto size = static_cast<size_t>(n);
  const bool whole = size >= kVersion1Size && ((counters.version == 1 && size == kVersion1Size) ||
                                               (counters.version == 2 && size == sizeof(counters)));
  if (!whole) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a counters file of this version"));
  }
  if (counters.version == 1) {
    counters.heartbeat_ns = 0;
  }
  return counters;
}

}  // namespace stagehand::iscsi
