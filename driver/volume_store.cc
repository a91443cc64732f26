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
#include "proto/json_file.h"

namespace stagehand::driver {

std::string VolumeStore::PathFor(const std::string& volume_id) const {
  return JoinPath(dir_, absl::StrCat(Sha256Hex(volume_id), ".json"));
}

absl::StatusOr<std::optional<state::v1::VolumeRecord>> VolumeStore::Load(
    const std::string& volume_id) const {
  const std::string path = PathFor(volume_id);
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return std::nullopt;
    }
    return text.status();
  }
  state::v1::VolumeRecord record;
  auto parsed = google::protobuf::util::JsonStringToMessage(*text, &record);
  if (!parsed.ok()) {
    return absl::DataLossError(
        absl::StrCat("volume record '", path, "' is corrupt: ", std::string(parsed.message())));
  }
  SH_RETURN_IF_ERROR(CheckRecord(record, path, volume_id));
  return record;
}

absl::Status VolumeStore::CheckRecord(const state::v1::VolumeRecord& record,
                                      const std::string& path, const std::string& volume_id) const {
  if (records_ == Records::kPartial) {
    return absl::OkStatus();
  }
  std::vector<std::string> missing;
  if (record.volume_id().empty()) {
    missing.emplace_back("volume_id");
  }
  if (record.phase() == state::v1::VolumeRecord::PHASE_UNKNOWN) {
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

absl::Status VolumeStore::Save(const state::v1::VolumeRecord& record) const {
  SH_RETURN_IF_ERROR(MakeDirs(dir_, 0700));
  return proto::WriteJsonFile(PathFor(record.volume_id()), record,
                              {.mode = 0600, .proto_field_names = true});
}

absl::Status VolumeStore::Remove(const std::string& volume_id) const {
  return RemoveFileIfExists(PathFor(volume_id));
}

std::vector<state::v1::VolumeRecord> VolumeStore::List(std::vector<std::string>* errors) const {
  std::vector<state::v1::VolumeRecord> out;
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
    auto text = ReadFileToString(JoinPath(dir_, name));
    state::v1::VolumeRecord record;
    if (!text.ok() || !google::protobuf::util::JsonStringToMessage(*text, &record).ok() ||
        !CheckRecord(record, JoinPath(dir_, name), record.volume_id()).ok()) {
      if (errors != nullptr) {
        errors->push_back(JoinPath(dir_, name));
      }
      continue;
    }
    out.push_back(std::move(record));
  }
  closedir(d);
  return out;
}

}  // namespace stagehand::driver
