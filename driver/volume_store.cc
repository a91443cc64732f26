#include "driver/volume_store.h"

#include <dirent.h>

#include <cerrno>
#include <cstring>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <google/protobuf/util/json_util.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/sha256.h"
#include "driver/csi_validation.h"
#include "iscsi/state_conversions.h"
#include "proto/json_file.h"
#include "proto/state.pb.h"

namespace stagehand::driver {
namespace {

using state::v1::VolumeRecord;
using AccessMode = csi::v1::VolumeCapability::AccessMode;

std::string RecordPath(const std::string& dir, const std::string& volume_id) {
  return JoinPath(dir, absl::StrCat(Sha256Hex(volume_id), ".json"));
}

// nullopt when there is no file at `path`; DataLoss when it does not parse.
absl::StatusOr<std::optional<VolumeRecord>> ReadRecord(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return std::nullopt;
    }
    return text.status();
  }
  VolumeRecord record;
  auto parsed = google::protobuf::util::JsonStringToMessage(*text, &record);
  if (!parsed.ok()) {
    return absl::DataLossError(
        absl::StrCat("volume record '", path, "' is corrupt: ", std::string(parsed.message())));
  }
  return record;
}

absl::Status WriteRecord(const std::string& dir, const VolumeRecord& record) {
  SH_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  return proto::WriteJsonFile(RecordPath(dir, record.volume_id()), record,
                              {.mode = 0600, .proto_field_names = true});
}

// DataLoss when `record`, read from `path` for `volume_id`, lacks what it must hold.
absl::Status CheckRecord(const VolumeRecord& record, const std::string& path,
                         const std::string& volume_id) {
  std::vector<std::string> missing;
  if (record.volume_id().empty()) {
    missing.emplace_back("volume_id");
  }
  if (record.phase() == VolumeRecord::PHASE_UNKNOWN) {
    missing.emplace_back("phase");
  }
  if (record.staging_path().empty()) {
    missing.emplace_back("staging_path");
  }
  if (!missing.empty()) {
    return absl::DataLossError(absl::StrCat(
        "volume record '", path, "' lacks ", absl::StrJoin(missing, ", "),
        ": stagehand cannot tell what it staged and leaves the volume as it is; check the "
        "host's mounts and sessions, then repair or remove the record"));
  }
  if (record.volume_id() != volume_id) {
    return absl::DataLossError(absl::StrCat("volume record '", path, "' names volume '",
                                            record.volume_id(), "', not '", volume_id,
                                            "'; it is left as it is"));
  }
  return absl::OkStatus();
}

StagedVolume::Phase PhaseOf(VolumeRecord::Phase phase) {
  switch (phase) {
    case VolumeRecord::STAGED:
      return StagedVolume::Phase::kStaged;
    case VolumeRecord::UNSTAGING:
      return StagedVolume::Phase::kUnstaging;
    default:  // CheckRecord refuses PHASE_UNKNOWN.
      return StagedVolume::Phase::kStaging;
  }
}

VolumeRecord::Phase ToProto(StagedVolume::Phase phase) {
  switch (phase) {
    case StagedVolume::Phase::kStaged:
      return VolumeRecord::STAGED;
    case StagedVolume::Phase::kUnstaging:
      return VolumeRecord::UNSTAGING;
    case StagedVolume::Phase::kStaging:
      break;
  }
  return VolumeRecord::STAGING;
}

StagedVolume FromRecord(const VolumeRecord& r) {
  StagedVolume v;
  v.volume_id = r.volume_id();
  v.staging_path = r.staging_path();
  v.phase = PhaseOf(r.phase());
  v.capability.block = r.block();
  v.capability.fs_type = r.fs_type();
  v.capability.mount_flags.assign(r.mount_flags().begin(), r.mount_flags().end());
  // By name: a reordered enum never changes what a record means.
  AccessMode::Mode mode = AccessMode::UNKNOWN;
  if (AccessMode::Mode_Parse(r.access_mode(), &mode)) {
    v.capability.access_mode = mode;
  }
  v.capability.read_only_mode = IsReaderOnly(v.capability.access_mode);
  v.volume_context.insert(r.volume_context().begin(), r.volume_context().end());
  for (const auto& p : r.portals()) {
    v.portals.push_back(iscsi::FromProto(p));
  }
  v.iqn = r.iqn();
  v.lun = r.lun();
  v.identity = iscsi::FromProto(r.identity());
  v.capacity_bytes = r.capacity_bytes();
  v.formatted_by_us = r.formatted_by_us();
  v.xfs_nouuid = r.xfs_nouuid();
  for (const auto& p : r.publishes()) {
    v.publications.push_back(
        Publication{.target_path = p.target_path(),
                    .readonly = p.readonly(),
                    .mount_flags = {p.mount_flags().begin(), p.mount_flags().end()}});
  }
  v.session = transport::UpgradeSessionRecord(r.session());
  return v;
}

VolumeRecord ToRecord(const StagedVolume& v) {
  VolumeRecord r;
  r.set_volume_id(v.volume_id);
  r.set_staging_path(v.staging_path);
  r.set_phase(ToProto(v.phase));
  r.set_block(v.capability.block);
  r.set_fs_type(v.capability.fs_type);
  for (const auto& f : v.capability.mount_flags) {
    r.add_mount_flags(f);
  }
  if (v.capability.access_mode != AccessMode::UNKNOWN) {
    r.set_access_mode(AccessMode::Mode_Name(v.capability.access_mode));
  }
  r.mutable_volume_context()->insert(v.volume_context.begin(), v.volume_context.end());
  for (const auto& p : v.portals) {
    iscsi::ToProto(p, r.add_portals());
  }
  r.set_iqn(v.iqn);
  r.set_lun(v.lun);
  if (!v.identity.Empty()) {
    iscsi::ToProto(v.identity, r.mutable_identity());
  }
  r.set_capacity_bytes(v.capacity_bytes);
  r.set_formatted_by_us(v.formatted_by_us);
  r.set_xfs_nouuid(v.xfs_nouuid);
  for (const auto& p : v.publications) {
    auto* out = r.add_publishes();
    out->set_target_path(p.target_path);
    out->set_readonly(p.readonly);
    for (const auto& f : p.mount_flags) {
      out->add_mount_flags(f);
    }
  }
  *r.mutable_session() = v.session;
  return r;
}

}  // namespace

std::string VolumeStore::PathFor(const std::string& volume_id) const {
  return RecordPath(dir_, volume_id);
}

absl::StatusOr<std::optional<StagedVolume>> VolumeStore::Load(const std::string& volume_id) const {
  const std::string path = PathFor(volume_id);
  SH_ASSIGN_OR_RETURN(std::optional<VolumeRecord> record, ReadRecord(path));
  if (!record.has_value()) {
    return std::nullopt;
  }
  SH_RETURN_IF_ERROR(CheckRecord(*record, path, volume_id));
  return FromRecord(*record);
}

absl::Status VolumeStore::Save(const StagedVolume& volume) const {
  return WriteRecord(dir_, ToRecord(volume));
}

absl::Status VolumeStore::Remove(const std::string& volume_id) const {
  return RemoveFileIfExists(PathFor(volume_id));
}

std::vector<StagedVolume> VolumeStore::List(std::vector<std::string>* errors) const {
  std::vector<StagedVolume> out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno != ENOENT && errors != nullptr) {
      errors->push_back(absl::StrCat(dir_, " (", ErrnoText(errno), ")"));
    }
    return out;
  }
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != 69 || !name.ends_with(".json")) {
      continue;
    }
    const std::string path = JoinPath(dir_, name);
    auto record = ReadRecord(path);
    if (!record.ok() || !record->has_value() ||
        !CheckRecord(**record, path, (*record)->volume_id()).ok()) {
      if (errors != nullptr && !(record.ok() && !record->has_value())) {  // Not removed since.
        errors->push_back(path);
      }
      continue;
    }
    out.push_back(FromRecord(**record));
  }
  closedir(d);
  return out;
}

absl::StatusOr<std::optional<FormatIntent>> FormatIntentStore::Load(
    const std::string& volume_id) const {
  SH_ASSIGN_OR_RETURN(std::optional<VolumeRecord> record, ReadRecord(RecordPath(dir_, volume_id)));
  if (!record.has_value()) {
    return std::nullopt;
  }
  return FormatIntent{.volume_id = record->volume_id(),
                      .identity = iscsi::FromProto(record->identity()),
                      .fs_type = record->fs_type()};
}

absl::Status FormatIntentStore::Save(const FormatIntent& intent) const {
  VolumeRecord record;
  record.set_volume_id(intent.volume_id);
  iscsi::ToProto(intent.identity, record.mutable_identity());
  record.set_fs_type(intent.fs_type);
  return WriteRecord(dir_, record);
}

absl::Status FormatIntentStore::Remove(const std::string& volume_id) const {
  return RemoveFileIfExists(RecordPath(dir_, volume_id));
}

}  // namespace stagehand::driver
