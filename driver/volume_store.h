#pragma once

// Persisted per-volume records of the built-in driver: <dir>/<sha256(volume_id)>.json, mode
// 0600, written atomically. The record is written before any side effect, so that a restarted
// agent knows what to undo, and it lives in the state directory (not tmpfs), so that it survives
// a reboot.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/state.pb.h"

namespace stagehand::driver {

class VolumeStore {
 public:
  // `dir` is created (0700) on first write.
  explicit VolumeStore(std::string dir) : dir_(std::move(dir)) {}

  // nullopt when there is no record. DataLoss when the record exists but cannot be parsed.
  absl::StatusOr<std::optional<state::v1::VolumeRecord>> Load(const std::string& volume_id) const;

  absl::Status Save(const state::v1::VolumeRecord& record) const;

  // OK when there is no record.
  absl::Status Remove(const std::string& volume_id) const;

  // Every record; unreadable ones (and an unreadable directory) are skipped and reported in
  // `errors`.
  std::vector<state::v1::VolumeRecord> List(std::vector<std::string>* errors = nullptr) const;

  std::string PathFor(const std::string& volume_id) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace stagehand::driver
