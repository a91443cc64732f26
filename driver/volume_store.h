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
  // What a record must hold to be used.
  enum class Records {
    // Volume records: a record that parses but lacks its volume id, phase or staging path (or
    // names another volume) cannot say what to undo, and is treated as unreadable.
    kVolumes,
    // Partial records (format intents): any record that parses.
    kPartial,
  };

  // `dir` is created (0700) on first write.
  explicit VolumeStore(std::string dir, Records records = Records::kVolumes)
      : dir_(std::move(dir)), records_(records) {}

  // nullopt when there is no record. DataLoss when the record exists but cannot be parsed or
  // lacks what it must hold; the message says which, and that the record is left as it is.
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
  // DataLoss when `record`, read from `path` for `volume_id`, lacks what it must hold.
  absl::Status CheckRecord(const state::v1::VolumeRecord& record, const std::string& path,
                           const std::string& volume_id) const;

  std::string dir_;
  Records records_;
};

}  // namespace stagehand::driver
