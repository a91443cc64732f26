#pragma once

// The reconciler's desired state: which volumes the manifests declare, which file declares each,
// and which files are broken. Like the kubelet's desired state of the world, it only records what
// is asked for; it never looks at the host.
//
// A declaration that conflicts with another file's (the same volume name, the same driver and
// volume handle, or a shared publish target) is refused: the file gets a manifest error and the
// other file's volume stays as it is. Lookups for these conflicts are indexed, so that declaring
// N volumes costs O(N log N), not O(N^2).
//
// Not thread-safe: the reconciler holds it under its lock.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reconciler/volume_spec.h"

namespace stagehand::reconciler {

class DesiredState {
 public:
  // Declares `spec` from `file` (replacing what `file` declared before). Returns the names
  // whose declaration changed: empty when the declaration was refused (see ErrorOf(file)).
  std::vector<std::string> Declare(const std::string& file, VolumeSpec spec);

  // `file` cannot be parsed: what it declared before stays declared, and a volume recorded as
  // declared by it is not torn down.
  void ReportError(const std::string& file, std::string error);

  // `file` is gone: returns the volume it declared, which is no longer declared.
  std::optional<std::string> Remove(const std::string& file);

  // `from` was renamed to `to`. Returns the names whose declaration changed (what `to` declared
  // before, and the volume `from` declared, now declared by `to`).
  std::vector<std::string> Rename(const std::string& from, const std::string& to);

  // Every file present at start has been reported.
  void SetComplete() { complete_ = true; }

  bool complete() const { return complete_; }

  const VolumeSpec* Find(const std::string& name) const;
  // The file that declares `name`; empty when none does.
  std::string FileOf(const std::string& name) const;
  // Why `file` is broken; nullptr when it is not.
  const std::string* ErrorOf(const std::string& file) const;
  // Errors of files that declare no volume (shown on their own).
  std::map<std::string, std::string> ErrorsWithoutVolume() const;

  const std::map<std::string, VolumeSpec>& volumes() const { return volumes_; }

 private:
  // Why `spec` from `file` conflicts with another file's declaration; empty when it does not.
  std::string Conflict(const std::string& file, const VolumeSpec& spec) const;
  void Insert(const std::string& file, VolumeSpec spec);
  void Erase(const std::string& name);

  bool complete_ = false;
  std::map<std::string, VolumeSpec> volumes_;                             // By name.
  std::map<std::string, std::string> file_of_name_;                       // Name -> file.
  std::map<std::string, std::string> name_of_file_;                       // File -> name.
  std::map<std::string, std::string> errors_;                             // File -> error.
  std::map<std::pair<std::string, std::string>, std::string> by_handle_;  // (driver, handle).
  std::map<std::string, std::string> by_target_;                          // Publish target -> name.
};

}  // namespace stagehand::reconciler
