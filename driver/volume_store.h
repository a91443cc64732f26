#pragma once

// Persisted records of the built-in driver, one file per volume: <dir>/<sha256(volume_id)>.json,
// mode 0600, written atomically. A volume's record is written before any side effect, so that a
// restarted agent knows what to undo, and it lives in the state directory (not tmpfs), so that it
// survives a reboot. The only place that converts between the domain values (staged_volume.h)
// and the protobuf record (proto/state.proto), which keeps reading what earlier versions wrote.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "driver/staged_volume.h"

namespace stagehand::driver {

class VolumeStore {
 public:
  // `dir` is created (0700) on first write.
  explicit VolumeStore(std::string dir) : dir_(std::move(dir)) {}

  // nullopt when there is no record. DataLoss when the record exists but cannot be parsed, lacks
  // its volume id, phase or staging path (it cannot say what to undo), or names another volume;
  // the message says which, and that the record is left as it is.
  absl::StatusOr<std::optional<StagedVolume>> Load(const std::string& volume_id) const;

  absl::Status Save(const StagedVolume& volume) const;

  // OK when there is no record.
  absl::Status Remove(const std::string& volume_id) const;

  // Every volume; unreadable records (and an unreadable directory) are skipped and reported in
  // `errors`.
  std::vector<StagedVolume> List(std::vector<std::string>* errors = nullptr) const;

  std::string PathFor(const std::string& volume_id) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Formats started and not seen finish, in the same file layout (and the same record message:
// volume_id, identity and fs_type).
class FormatIntentStore {
 public:
  explicit FormatIntentStore(std::string dir) : dir_(std::move(dir)) {}

  // nullopt when there is none; DataLoss when the record cannot be parsed.
  absl::StatusOr<std::optional<FormatIntent>> Load(const std::string& volume_id) const;
  absl::Status Save(const FormatIntent& intent) const;
  // OK when there is none.
  absl::Status Remove(const std::string& volume_id) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace stagehand::driver
