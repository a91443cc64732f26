#pragma once

// Data-path counters of a session process, shared with the agent through a small file that the
// session maps (<runtime_dir>/counters, mode 0600): the I/O thread bumps them in memory at no
// syscall cost, and the agent reads the file when Prometheus scrapes. Counters restart at zero
// with a new session process (Prometheus counter semantics).

#include <cstdint>
#include <string>

#include "base/status.h"

namespace stagehand::iscsi {

struct DataPathCounters {
  uint64_t version = 1;  // Layout version of this struct in the file.
  uint64_t read_ops = 0;
  uint64_t read_bytes = 0;
  uint64_t write_ops = 0;
  uint64_t write_bytes = 0;
  uint64_t flush_ops = 0;
  uint64_t io_errors = 0;  // Requests answered with an error (EIO) after retries.
};

// The session's side: creates (or truncates) the file and maps it. Not thread-safe; one writer.
class CountersFile {
 public:
  static absl::StatusOr<CountersFile> Create(const std::string& path);
  CountersFile() = default;
  CountersFile(CountersFile&& other) noexcept;
  CountersFile& operator=(CountersFile&& other) noexcept;
  CountersFile(const CountersFile&) = delete;
  CountersFile& operator=(const CountersFile&) = delete;
  ~CountersFile();

  // Null when not created. Fields are updated with relaxed atomic adds.
  DataPathCounters* get() const { return counters_; }

 private:
  explicit CountersFile(DataPathCounters* counters) : counters_(counters) {}

  DataPathCounters* counters_ = nullptr;
};

// Adds `n` to a counter in the shared mapping (or does nothing when `counters` is null).
void CountAdd(DataPathCounters* counters, uint64_t DataPathCounters::*field, uint64_t n);

// The agent's side: reads a snapshot. NotFound when the file does not exist; DataLoss when it is
// too short or of another layout version.
absl::StatusOr<DataPathCounters> ReadCounters(const std::string& path);

}  // namespace stagehand::iscsi
