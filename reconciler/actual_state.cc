#include "reconciler/actual_state.h"

#include <absl/strings/str_cat.h>

#include "base/paths.h"
#include "base/sha256.h"

namespace stagehand::reconciler {

ActualTarget* ActualVolume::FindTarget(const std::string& path) {
  for (auto& t : targets) {
    if (t.target_path == path) {
      return &t;
    }
  }
  return nullptr;
}

const ActualTarget* ActualVolume::FindTarget(const std::string& path) const {
  return const_cast<ActualVolume*>(this)->FindTarget(path);
}

const ActualVolume* ActualState::Find(const std::string& name) const {
  auto it = volumes_.find(name);
  return it == volumes_.end() ? nullptr : &it->second;
}

ActualVolume* ActualState::FindMutable(const std::string& name) {
  auto it = volumes_.find(name);
  return it == volumes_.end() ? nullptr : &it->second;
}

void ActualState::Set(ActualVolume volume) {
  Erase(volume.name);
  by_staging_path_.emplace(volume.staging_path, volume.name);
  std::string name = volume.name;
  volumes_.insert_or_assign(std::move(name), std::move(volume));
}

void ActualState::Erase(const std::string& name) {
  auto it = volumes_.find(name);
  if (it == volumes_.end()) {
    return;
  }
  auto [first, last] = by_staging_path_.equal_range(it->second.staging_path);
  for (auto i = first; i != last; ++i) {
    if (i->second == name) {
      by_staging_path_.erase(i);
      break;
    }
  }
  volumes_.erase(it);
}

std::string ActualState::OtherAt(const std::string& staging_path, const std::string& name) const {
  auto [first, last] = by_staging_path_.equal_range(staging_path);
  for (auto i = first; i != last; ++i) {
    if (i->second != name) {
      return i->second;
    }
  }
  return "";
}

std::string StagingPathFor(const std::string& root, const std::string& driver,
                           const std::string& volume_handle) {
  return JoinPath(root, absl::StrCat("plugins/kubernetes.io/csi/", driver, "/",
                                     Sha256Hex(volume_handle), "/globalmount"));
}

}  // namespace stagehand::reconciler
