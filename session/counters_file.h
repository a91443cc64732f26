#pragma once

// The session's side of the data-path counters file (session/protocol.h): it creates the file,
// maps it and bumps the counters and the heartbeat in the mapping.

#include <cstdint>
#include <string>

#include "base/status.h"
#include "session/protocol.h"

namespace stagehand::session {

// Creates (or truncates) the file and maps it. Not thread-safe; one writer.
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

}  // namespace stagehand::session
