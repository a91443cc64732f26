#include "reconciler/desired_state.h"

#include <absl/strings/str_cat.h>

namespace stagehand::reconciler {

std::string DesiredState::Conflict(const std::string& file, const VolumeSpec& spec) const {
  if (auto other = file_of_name_.find(spec.name);
      other != file_of_name_.end() && other->second != file) {
    return absl::StrCat("volume '", spec.name, "' is already declared in '", other->second, "'");
  }
  // What `file` itself declares now is replaced, so it conflicts with nothing.
  auto other_file = [&](const std::string& name) -> const std::string* {
    const std::string& f = file_of_name_.at(name);
    return f == file ? nullptr : &f;
  };
  // Two names for one volume would share its staging path: unstaging one would pull the
  // filesystem out from under the other.
  if (auto it = by_handle_.find({spec.driver, spec.volume_handle});
      it != by_handle_.end() && it->second != spec.name) {
    if (const std::string* f = other_file(it->second)) {
      return absl::StrCat("volumeHandle '", spec.volume_handle, "' of driver '", spec.driver,
                          "' is already declared as volume '", it->second, "' in '", *f,
                          "'; one volume can be declared once (list several targets under "
                          "`publish`)");
    }
  }
  // Two volumes on one target path would mount over each other.
  for (const auto& mine : spec.publish) {
    auto it = by_target_.find(mine.target_path);
    if (it == by_target_.end() || it->second == spec.name) {
      continue;
    }
    if (const std::string* f = other_file(it->second)) {
      return absl::StrCat("targetPath '", mine.target_path, "' is already a target of volume '",
                          it->second, "' in '", *f, "'");
    }
  }
  return "";
}

std::vector<std::string> DesiredState::Declare(const std::string& file, VolumeSpec spec) {
  if (std::string conflict = Conflict(file, spec); !conflict.empty()) {
    errors_[file] = std::move(conflict);
    return {};
  }
  std::vector<std::string> changed;
  if (auto old = name_of_file_.find(file); old != name_of_file_.end() && old->second != spec.name) {
    changed.push_back(old->second);
    Erase(old->second);
  }
  changed.push_back(spec.name);
  errors_.erase(file);
  Insert(file, std::move(spec));
  return changed;
}

void DesiredState::ReportError(const std::string& file, std::string error) {
  errors_[file] = std::move(error);
}

std::optional<std::string> DesiredState::Remove(const std::string& file) {
  errors_.erase(file);
  auto it = name_of_file_.find(file);
  if (it == name_of_file_.end()) {
    return std::nullopt;
  }
  std::string name = it->second;
  Erase(name);
  return name;
}

std::vector<std::string> DesiredState::Rename(const std::string& from, const std::string& to) {
  std::vector<std::string> changed;
  // What `to` declared before it was replaced goes, as if removed.
  if (auto it = name_of_file_.find(to); it != name_of_file_.end()) {
    changed.push_back(it->second);
    Erase(it->second);
  }
  errors_.erase(to);
  if (auto error = errors_.find(from); error != errors_.end()) {
    errors_[to] = std::move(error->second);
    errors_.erase(error);
  }
  if (auto it = name_of_file_.find(from); it != name_of_file_.end()) {
    const std::string name = it->second;
    name_of_file_.erase(it);
    name_of_file_[to] = name;
    file_of_name_[name] = to;
    changed.push_back(name);
  }
  return changed;
}

const VolumeSpec* DesiredState::Find(const std::string& name) const {
  auto it = volumes_.find(name);
  return it == volumes_.end() ? nullptr : &it->second;
}

std::string DesiredState::FileOf(const std::string& name) const {
  auto it = file_of_name_.find(name);
  return it == file_of_name_.end() ? "" : it->second;
}

const std::string* DesiredState::ErrorOf(const std::string& file) const {
  auto it = errors_.find(file);
  return it == errors_.end() ? nullptr : &it->second;
}

std::map<std::string, std::string> DesiredState::ErrorsWithoutVolume() const {
  std::map<std::string, std::string> out;
  for (const auto& [file, error] : errors_) {
    if (!name_of_file_.contains(file)) {
      out[file] = error;
    }
  }
  return out;
}

void DesiredState::Insert(const std::string& file, VolumeSpec spec) {
  const std::string name = spec.name;
  if (auto old = volumes_.find(name); old != volumes_.end()) {
    Erase(name);  // The same file declares it again (maybe changed): drop its old index entries.
  }
  by_handle_[{spec.driver, spec.volume_handle}] = name;
  for (const auto& t : spec.publish) {
    by_target_[t.target_path] = name;
  }
  name_of_file_[file] = name;
  file_of_name_[name] = file;
  volumes_[name] = std::move(spec);
}

void DesiredState::Erase(const std::string& name) {
  auto it = volumes_.find(name);
  if (it == volumes_.end()) {
    return;
  }
  const VolumeSpec& spec = it->second;
  if (auto h = by_handle_.find({spec.driver, spec.volume_handle});
      h != by_handle_.end() && h->second == name) {
    by_handle_.erase(h);
  }
  for (const auto& t : spec.publish) {
    if (auto p = by_target_.find(t.target_path); p != by_target_.end() && p->second == name) {
      by_target_.erase(p);
    }
  }
  if (auto f = file_of_name_.find(name); f != file_of_name_.end()) {
    if (auto n = name_of_file_.find(f->second); n != name_of_file_.end() && n->second == name) {
      name_of_file_.erase(n);
    }
    file_of_name_.erase(f);
  }
  volumes_.erase(it);
}

}  // namespace stagehand::reconciler
