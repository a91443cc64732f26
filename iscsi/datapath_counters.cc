#include "iscsi/datapath_counters.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
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
  if (static_cast<size_t>(n) != sizeof(counters) ||
      counters.version != DataPathCounters{}.version) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a counters file of this version"));
  }
  return counters;
}

}  // namespace stagehand::iscsi
