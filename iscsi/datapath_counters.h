#pragma once

// Data-path counters of a session process, shared with the agent through a small file that the
// session maps (<runtime_dir>/counters, mode 0600): the I/O thread bumps them in memory at no
// syscall cost, and the agent reads the file when Prometheus scrapes. Counters restart at zero
// with a new session process (Prometheus counter semantics).
//
// The same mapping carries the session's heartbeat: the time its loop last turned. The loop turns
// at least once a second (a timer), so a heartbeat that stops moving while the process runs means
// a session that answers nothing (deadlocked, frozen, stuck in reclaim), told without touching
// its FUSE mount.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace stagehand::iscsi {

struct DataPathCounters {
  // Layout version of this struct in the file: 1 had no heartbeat (sessions started by older
  // builds), 2 added it at the end.
  uint64_t version = 2;
  uint64_t read_ops = 0;
  uint64_t read_bytes = 0;
  uint64_t write_ops = 0;
  uint64_t write_bytes = 0;
  uint64_t flush_ops = 0;
  uint64_t io_errors = 0;  // Requests answered with an error (EIO) after retries.
  // CLOCK_MONOTONIC, in nanoseconds, of the last turn of the session's loop; 0: unknown (not
  // started yet, or a version 1 file).
  uint64_t heartbeat_ns = 0;
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

// Records a turn of the session's loop now (or does nothing when `counters` is null).
void Beat(DataPathCounters* counters);

// CLOCK_MONOTONIC now, in nanoseconds: what Beat writes.
uint64_t MonotonicNowNs();

// How long ago the loop last turned, as of `now_ns` (MonotonicNowNs); nullopt when unknown.
std::optional<std::chrono::milliseconds> SinceLastBeat(const DataPathCounters& counters,
                                                       uint64_t now_ns);

// The agent's side: reads a snapshot. NotFound when the file does not exist; DataLoss when it is
// too short or of an unknown layout version (a version 1 file reads with heartbeat_ns 0).
absl::StatusOr<DataPathCounters> ReadCounters(const std::string& path);

}  // namespace stagehand::iscsi
