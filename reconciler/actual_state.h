#pragma once

// What the host has, as far as the reconciler did it: per declared volume, whether it is staged
// and where it is published. Each change is persisted *before* the CSI call that makes it (as
// "uncertain"), so a crash at any moment leaves a record that says what may exist.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "reconciler/volume_spec.h"

namespace stagehand::reconciler {

enum class StageState {
  kNone,       // Not staged (only while a first stage is being attempted).
  kUncertain,  // A stage or unstage was started and its outcome is unknown.
  kStaged,
};

enum class PublishState {
  kUncertain,  // A publish or unpublish was started and its outcome is unknown.
  kPublished,
};

struct ActualTarget {
  std::string target_path;
  bool read_only = false;
  PublishState state = PublishState::kUncertain;

  bool operator==(const ActualTarget&) const = default;
};

struct ActualVolume {
  std::string name;
  std::string manifest_file;  // The file that declared it.
  std::string driver;
  std::string volume_handle;
  Capability capability;
  std::map<std::string, std::string> volume_context;
  std::string staging_path;
  StageState stage = StageState::kNone;
  std::vector<ActualTarget> targets;

  bool operator==(const ActualVolume&) const = default;

  ActualTarget* FindTarget(const std::string& path);
  const ActualTarget* FindTarget(const std::string& path) const;
};

// The actual state in memory, by volume name, like the kubelet's actual state of the world: what
// the records say exists (reconstructed at start, then kept by the operations). It finds the
// volume that holds a staging path without a scan. Not thread-safe: the reconciler holds it under
// its lock.
class ActualState {
 public:
  const ActualVolume* Find(const std::string& name) const;
  // For changes of stage and target states (never of the name or staging path).
  ActualVolume* FindMutable(const std::string& name);
  // Adds or replaces the record of volume.name.
  void Set(ActualVolume volume);
  void Erase(const std::string& name);
  // A volume other than `name` whose record holds `staging_path`; empty when there is none.
  std::string OtherAt(const std::string& staging_path, const std::string& name) const;

  const std::map<std::string, ActualVolume>& volumes() const { return volumes_; }

 private:
  std::map<std::string, ActualVolume> volumes_;
  std::multimap<std::string, std::string> by_staging_path_;  // Staging path -> name.
};

// Persistence of ActualVolume records. Thread-safe for different names.
class ActualStore {
 public:
  virtual ~ActualStore() = default;

  // Every record; unreadable ones are reported in `errors` and skipped.
  virtual std::vector<ActualVolume> List(std::vector<std::string>& errors) = 0;
  // Replaces the record of volume.name durably.
  virtual absl::Status Save(const ActualVolume& volume) = 0;
  // Removes the record (and whatever it keeps beside the staging path). OK if absent.
  virtual absl::Status Remove(const ActualVolume& volume) = 0;
};

// The mount points of the host (for reconstruction and the periodic safety net).
class MountTable {
 public:
  virtual ~MountTable() = default;

  virtual absl::StatusOr<std::set<std::string>> MountPoints() = 0;
};

// <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount, as the kubelet lays out.
std::string StagingPathFor(const std::string& root, const std::string& driver,
                           const std::string& volume_handle);

}  // namespace stagehand::reconciler
