#include "manifests/manifest_volume_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <absl/strings/str_cat.h>
#include <google/protobuf/util/json_util.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "proto/json_file.h"
#include "proto/state.pb.h"

namespace stagehand::manifests {
namespace {

using Record = state::v1::ManifestVolumeRecord;

Record ToRecord(const reconciler::ActualVolume& v) {
  Record r;
  r.set_name(v.name);
  r.set_manifest_file(v.manifest_file);
  r.set_driver(v.driver);
  r.set_volume_handle(v.volume_handle);
  r.set_block(v.capability.block);
  r.set_fs_type(v.capability.fs_type);
  for (const auto& f : v.capability.mount_flags) {
    r.add_mount_flags(f);
  }
  r.set_access_mode(static_cast<int>(v.capability.access_mode));
  for (const auto& [k, val] : v.volume_context) {
    (*r.mutable_volume_context())[k] = val;
  }
  r.set_staging_path(v.staging_path);
  r.set_stage(static_cast<Record::StageState>(v.stage));
  for (const auto& t : v.targets) {
    auto* target = r.add_targets();
    target->set_target_path(t.target_path);
    target->set_read_only(t.read_only);
    target->set_state(t.state == reconciler::PublishState::kPublished ? Record::PUBLISHED
                                                                      : Record::PUBLISH_UNCERTAIN);
  }
  return r;
}

reconciler::ActualVolume FromRecord(const Record& r) {
  reconciler::ActualVolume v;
  v.name = r.name();
  v.manifest_file = r.manifest_file();
  v.driver = r.driver();
  v.volume_handle = r.volume_handle();
  v.capability.block = r.block();
  v.capability.fs_type = r.fs_type();
  v.capability.mount_flags.assign(r.mount_flags().begin(), r.mount_flags().end());
  v.capability.access_mode = static_cast<reconciler::AccessMode>(r.access_mode());
  v.volume_context.insert(r.volume_context().begin(), r.volume_context().end());
  v.staging_path = r.staging_path();
  switch (r.stage()) {
    case Record::STAGED:
      v.stage = reconciler::StageState::kStaged;
      break;
    case Record::STAGE_UNCERTAIN:
      v.stage = reconciler::StageState::kUncertain;
      break;
    default:
      v.stage = reconciler::StageState::kNone;
  }
  for (const auto& t : r.targets()) {
    v.targets.push_back({t.target_path(), t.read_only(),
                         t.state() == Record::PUBLISHED ? reconciler::PublishState::kPublished
                                                        : reconciler::PublishState::kUncertain});
  }
  return v;
}

// Atomic but not fsynced: after a power loss nothing is mounted any more, and a record that is
// lost or stale is reconciled against the mount table like any uncertain state. A volume's record
// is rewritten before and after each of its CSI calls, so it keeps its previous version beside it
// (volume.json.tmp) to write over: no inode is created or freed per write.
constexpr proto::JsonFileOptions kRecordFile{
    .mode = 0600, .durability = Durability::kAtomicRewrite, .proto_field_names = true};
// Written once per staging path.
constexpr proto::JsonFileOptions kVolDataFile{
    .mode = 0600, .durability = Durability::kAtomicOnly, .proto_field_names = true};

}  // namespace

std::string ManifestVolumeStore::RecordPath(const std::string& name) const {
  return JoinPath(state_dir_, absl::StrCat("volumes/", name, "/volume.json"));
}

std::vector<reconciler::ActualVolume> ManifestVolumeStore::List(std::vector<std::string>& errors) {
  std::vector<reconciler::ActualVolume> out;
  const std::string dir = JoinPath(state_dir_, "volumes");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return out;
  }
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.starts_with('.')) {
      continue;
    }
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {  // Some filesystems do not fill d_type.

      struct stat st {};

      is_dir = stat(JoinPath(dir, name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    if (!is_dir) {
      continue;  // The built-in driver's own records are files in the same directory.
    }
    const std::string path = RecordPath(name);
    auto text = ReadFileToString(path);
    if (!text.ok()) {
      if (!absl::IsNotFound(text.status())) {
        errors.push_back(absl::StrCat(path, ": ", text.status().message()));
      }
      continue;
    }
    Record record;
    if (auto parsed = google::protobuf::util::JsonStringToMessage(*text, &record); !parsed.ok()) {
      errors.push_back(absl::StrCat(path, ": corrupt: ", std::string(parsed.message())));
      continue;
    }
    if (record.name() != name) {
      errors.push_back(absl::StrCat(path, ": names volume '", record.name(), "'"));
      continue;
    }
    out.push_back(FromRecord(record));
  }
  closedir(d);
  return out;
}

absl::Status ManifestVolumeStore::Save(const reconciler::ActualVolume& volume) {
  const std::string path = RecordPath(volume.name);
  SH_RETURN_IF_ERROR(MakeDirs(ParentDir(path), 0700));
  SH_RETURN_IF_ERROR(proto::WriteJsonFile(path, ToRecord(volume), kRecordFile));
  if (!volume.staging_path.empty()) {
    const std::string vol_data = JoinPath(ParentDir(volume.staging_path), "vol_data.json");
    if (access(vol_data.c_str(), F_OK) != 0) {
      state::v1::VolData data;
      data.set_volume_handle(volume.volume_handle);
      data.set_driver_name(volume.driver);
      data.set_volume_name(volume.name);
      SH_RETURN_IF_ERROR(MakeDirs(ParentDir(volume.staging_path), 0750));
      SH_RETURN_IF_ERROR(proto::WriteJsonFile(vol_data, data, kVolDataFile));
    }
  }
  return absl::OkStatus();
}

absl::Status ManifestVolumeStore::Remove(const reconciler::ActualVolume& volume) {
  if (!volume.staging_path.empty()) {
    // Only empty directories go: a staging path that is still mounted stays (EBUSY).
    (void)rmdir(volume.staging_path.c_str());
    SH_RETURN_IF_ERROR(
        RemoveFileIfExists(JoinPath(ParentDir(volume.staging_path), "vol_data.json")));
    (void)rmdir(ParentDir(volume.staging_path).c_str());
  }
  const std::string path = RecordPath(volume.name);
  SH_RETURN_IF_ERROR(RemoveRewrittenFile(path));
  (void)rmdir(ParentDir(path).c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::set<std::string>> HostMountTable::MountPoints() {
  SH_ASSIGN_OR_RETURN(auto mounts, mounter_.List());
  std::set<std::string> out;
  for (const auto& m : mounts) {
    out.insert(m.target);
  }
  return out;
}

}  // namespace stagehand::manifests
