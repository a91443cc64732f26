#include "manifests/manifest_source.h"

#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "base/c_handle.h"
#include "base/file_io.h"
#include "base/log.h"
#include "base/paths.h"
#include "manifests/manifest.h"

namespace stagehand::manifests {
namespace {

constexpr LogComponent kComponent = LogComponent::kManifests;

// IN_CLOSE_WRITE, not IN_MODIFY: a file is read once its writer is done with it. IN_CREATE only
// for links (`ln -s`, `ln`), which are complete when they appear and are never written.
constexpr uint32_t kDirMask = IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM |
                              IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
// Only while the directory is gone: waits for it to be created or renamed back.
constexpr uint32_t kParentMask = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR;

using Dir = CHandle<DIR, &closedir>;

bool IsManifestName(std::string_view name) {
  return !name.empty() && name.front() != '.' &&
         (absl::EndsWith(ToAbsl(name), ".yaml") || absl::EndsWith(ToAbsl(name), ".yml"));
}

std::string BaseName(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

// A symbolic link, or a hard link to a file that exists already: what IN_CREATE announces
// complete (a new regular file is still being written; IN_CLOSE_WRITE follows).
bool IsLink(const std::string& path) {
  struct stat st {};

  return lstat(path.c_str(), &st) == 0 &&
         (S_ISLNK(st.st_mode) || (S_ISREG(st.st_mode) && st.st_nlink > 1));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ManifestSource>> ManifestSource::Start(std::string dir,
                                                                      std::string state_dir,
                                                                      ManifestListener& listener,
                                                                      bool create_if_missing,
                                                                      EventLoop* loop) {
  if (!IsCleanAbsolutePath(dir) || dir == "/") {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest directory '", dir, "' must be an absolute, normalised path"));
  }
  if (!IsCleanAbsolutePath(state_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("state directory '", state_dir, "' must be an absolute, normalised path"));
  }
  SH_ASSIGN_OR_RETURN(DirWatch watch, DirWatch::Create());
  std::unique_ptr<ManifestSource> source(
      new ManifestSource(std::move(dir), std::move(state_dir), listener, std::move(watch)));

  struct stat st {};

  const bool exists = stat(source->dir_.c_str(), &st) == 0;
  if (!exists && create_if_missing) {
    SH_RETURN_IF_ERROR(MakeDirs(source->dir_, 0755));
  }
  if (exists || create_if_missing) {
    SH_RETURN_IF_ERROR(source->WatchDir());
    Log(kComponent).info("watching for volume manifests dir='{}'", source->dir_);
  } else {
    // A typo in --manifest-dir or a config volume not mounted yet must not read as "nothing is
    // declared": that would tear every volume down.
    source->hold_if_empty_ = true;
    source->SetProblem(absl::StrCat("manifest directory '", source->dir_,
                                    "' does not exist; the volumes stagehand manages stay as "
                                    "they are until it does (create it, or fix --manifest-dir)"));
    source->WatchForDir();
  }
  if (source->dir_watch_ >= 0) {
    source->Rescan();  // The watch is in place already: nothing created meanwhile is missed.
  }
  if (loop == nullptr) {
    source->own_loop_ = std::make_unique<LoopThread>();
    loop = &source->own_loop_->loop();
  }
  ManifestSource* self = source.get();
  // `self` outlives the watch: the destructor closes it before any member goes away.
  SH_ASSIGN_OR_RETURN(source->loop_watch_, LoopWatch::Start(*loop, source->watch_.Fd(),
                                                            [self] { self->HandleEvents(); }));
  return source;
}

ManifestSource::ManifestSource(std::string dir, std::string state_dir, ManifestListener& listener,
                               DirWatch watch)
    : dir_(std::move(dir)),
      state_dir_(std::move(state_dir)),
      listener_(listener),
      watch_(std::move(watch)) {}

ManifestSource::~ManifestSource() {
  loop_watch_.reset();
}

absl::Status ManifestSource::WatchDir() {
  SH_ASSIGN_OR_RETURN(dir_watch_, watch_.Add(dir_, kDirMask));
  return absl::OkStatus();
}

void ManifestSource::HandleEvents() {
  // One read's batch per call: the loop calls again while more is queued, and runs what is due
  // in between (the reconciler plans the first volumes while the rest are read).
  {
    const std::vector<DirWatch::Event> events = watch_.Read();
    // A rename inside the directory arrives as IN_MOVED_FROM + IN_MOVED_TO with one cookie,
    // normally in the same read: pair them so that the volume is never undeclared in between.
    std::map<uint32_t, std::string> moved_to;  // cookie -> new name
    for (const DirWatch::Event& event : events) {
      if (event.wd == dir_watch_ && (event.mask & IN_MOVED_TO) != 0 && event.cookie != 0 &&
          !event.name.empty()) {
        moved_to[event.cookie] = event.name;
      }
    }
    std::set<uint32_t> renamed;  // Cookies handled as renames: their IN_MOVED_TO is skipped.
    for (const DirWatch::Event& event : events) {
      const std::string& name = event.name;
      if ((event.mask & IN_Q_OVERFLOW) != 0) {
        Log(kComponent).warn("manifest source: inotify queue overflowed; rescanning '{}'", dir_);
        Rescan();
      } else if (event.wd == parent_watch_) {
        if (dir_watch_ >= 0) {
          continue;
        }
        if (watched_ancestor_ == ParentDir(dir_)) {
          if (name == BaseName(dir_) && WatchDir().ok()) {
            Log(kComponent).info("manifest directory '{}' is back", dir_);
            watch_.Remove(std::exchange(parent_watch_, -1));
            Rescan();
          }
        } else if (IsPathWithin(dir_, JoinPath(watched_ancestor_, name))) {
          WatchForDir();  // A directory on the way down appeared: watch closer.
        }
        // Each `continue` below skips an event for its own reason.
        // NOLINTNEXTLINE(bugprone-branch-clone)
      } else if (event.wd != dir_watch_) {
        continue;  // From a watch given up on already.
      } else if ((event.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0) {
        DirLost();
      } else if ((event.mask & IN_MOVED_FROM) != 0 && moved_to.count(event.cookie) != 0 &&
                 IsManifestName(name) && IsManifestName(moved_to[event.cookie])) {
        renamed.insert(event.cookie);
        Rename(name, moved_to[event.cookie]);
      } else if ((event.mask & IN_MOVED_TO) != 0 && renamed.count(event.cookie) != 0) {
        continue;  // The second half of a rename handled above.
      } else if (!IsManifestName(name)) {
        continue;
      } else if (hold_if_empty_) {
        Rescan();  // The first manifest in a directory that came back empty: list it whole.
      } else if ((event.mask & (IN_DELETE | IN_MOVED_FROM)) != 0) {
        Remove(name);
        // Written, or moved in; next: a symbolic link, which gets no IN_CLOSE_WRITE.
        // NOLINTNEXTLINE(bugprone-branch-clone)
      } else if ((event.mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) != 0) {
        Load(name);
      } else if ((event.mask & IN_CREATE) != 0 && IsLink(JoinPath(dir_, name))) {
        Load(name);
      }
    }
  }
}

std::optional<std::string> ManifestSource::Problem() const {
  MutexLock lock(problem_mu_);
  return problem_;
}

void ManifestSource::SetProblem(std::optional<std::string> problem) {
  {
    MutexLock lock(problem_mu_);
    if (problem_ == problem) {
      return;
    }
    problem_ = problem;
  }
  if (problem) {
    Log(kComponent).error("{}", *problem);
  }
  listener_.OnProblem(problem);
}

void ManifestSource::DirLost() {
  watch_.Remove(std::exchange(dir_watch_, -1));
  hold_if_empty_ = hold_if_empty_ || !files_.empty();
  SetProblem(absl::StrCat("manifest directory '", dir_,
                          "' was moved away or removed; its volumes stay as declared until it "
                          "is back (then files that are gone count as removed)"));
  WatchForDir();
}

void ManifestSource::WatchForDir() {
  watch_.Remove(std::exchange(parent_watch_, -1));
  // The nearest ancestor that exists: with its parent missing too (a typo high up in the path),
  // each directory created on the way down moves the watch one level closer.
  watched_ancestor_ = ParentDir(dir_);
  absl::StatusOr<int> parent = watch_.Add(watched_ancestor_, kParentMask);
  while (!parent.ok() && absl::IsNotFound(parent.status()) && watched_ancestor_ != "/") {
    watched_ancestor_ = ParentDir(watched_ancestor_);
    parent = watch_.Add(watched_ancestor_, kParentMask);
  }
  if (!parent.ok()) {
    Log(kComponent)
        .error("cannot watch for '{}' to appear: {}; restart stagehand once it exists", dir_,
               parent.status());
    return;
  }
  parent_watch_ = *parent;
  if (watched_ancestor_ != ParentDir(dir_)) {
    // The next directory down may have been created before the watch was set.
    const size_t from = watched_ancestor_ == "/" ? 1 : watched_ancestor_.size() + 1;

    struct stat st {};

    if (stat(dir_.substr(0, dir_.find('/', from)).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      WatchForDir();
    }
    return;
  }
  // It may have come back before the watch was set.
  if (WatchDir().ok()) {
    Log(kComponent).info("manifest directory '{}' is back", dir_);
    watch_.Remove(std::exchange(parent_watch_, -1));
    Rescan();
  }
}

void ManifestSource::Rescan() {
  std::vector<std::string> present;
  Dir dir(opendir(dir_.c_str()));
  if (!dir) {
    // Nothing is reported removed: an unreadable directory says nothing about what is declared.
    SetProblem(absl::StrCat("cannot list manifest directory '", dir_, "': ", ErrnoText(errno),
                            "; its volumes stay as declared"));
    return;
  }
  while (const dirent* entry = readdir(dir.get())) {
    if (IsManifestName(entry->d_name)) {
      present.emplace_back(entry->d_name);
    }
  }
  dir.reset();
  if (present.empty() && hold_if_empty_) {
    // Back (or there at last) but empty: most likely on its way (`mkdir` before the files are
    // copied in), not a wish to tear every volume down. Nothing counts as undeclared until the
    // first manifest shows up.
    SetProblem(absl::StrCat("manifest directory '", dir_,
                            "' is empty after it was missing; the volumes stagehand manages "
                            "stay as they are until a manifest appears in it"));
    return;
  }
  hold_if_empty_ = false;
  std::sort(present.begin(), present.end());
  std::vector<std::string> gone;
  for (const auto& [file, state] : files_) {
    if (!std::binary_search(present.begin(), present.end(), file)) {
      gone.push_back(file);
    }
  }
  for (const std::string& file : gone) {
    Remove(file);
  }
  for (const std::string& file : present) {
    Load(file);
  }
  SetProblem(std::nullopt);
  listener_.OnDirectoryListed();
}

void ManifestSource::Load(const std::string& file) {
  const std::string path = JoinPath(dir_, file);
  absl::StatusOr<reconciler::VolumeSpec> spec = LoadManifestFile(path);
  if (absl::IsNotFound(spec.status())) {
    struct stat st {};

    if (lstat(path.c_str(), &st) != 0) {
      Remove(file);  // Gone before it could be read; its delete event will find nothing to do.
      return;
    }
  }
  if (!spec.ok()) {
    Fail(file, spec.status());
    return;
  }
  if (absl::Status s = CheckTargetPaths(*spec, state_dir_); !s.ok()) {
    Fail(file, WithContext(s, path));
    return;
  }
  Declare(file, *std::move(spec));
}

void ManifestSource::Declare(const std::string& file, reconciler::VolumeSpec spec) {
  const std::string path = JoinPath(dir_, file);
  if (auto owner = owners_.find(spec.name); owner != owners_.end() && owner->second != file) {
    Fail(file, absl::AlreadyExistsError(absl::StrCat(
                   path, ": volume '", spec.name, "' is already declared in '", owner->second,
                   "'; give this volume another name or remove one of the files")));
    return;
  }
  FileState& state = files_[file];
  if (state.declared == spec && !state.error) {
    return;  // Re-saved without a change.
  }
  if (state.declared && state.declared->name != spec.name) {
    owners_.erase(state.declared->name);
  }
  owners_[spec.name] = file;
  state.declared = std::move(spec);
  state.error.reset();
  Log(kComponent)
      .info("manifest_declared file='{}' volume={} driver={} handle='{}' targets={}", path,
            state.declared->name, state.declared->driver, state.declared->volume_handle,
            state.declared->publish.size());
  listener_.OnVolumeDeclared(file, *state.declared);
}

void ManifestSource::Fail(const std::string& file, const absl::Status& error) {
  FileState& state = files_[file];
  std::string message = error.ToString();
  if (state.error == message) {
    return;  // Same problem as before.
  }
  state.error = std::move(message);
  Log(kComponent)
      .warn("manifest_error file='{}' err='{}'{}", JoinPath(dir_, file), ToStd(error.message()),
            state.declared ? absl::StrCat(", keeping volume ", state.declared->name) : "");
  listener_.OnManifestError(file, error);
}

void ManifestSource::Remove(const std::string& file) {
  auto it = files_.find(file);
  if (it == files_.end()) {
    return;
  }
  if (it->second.declared) {
    auto owner = owners_.find(it->second.declared->name);
    if (owner != owners_.end() && owner->second == file) {
      owners_.erase(owner);
    }
  }
  files_.erase(it);
  Log(kComponent).info("manifest_removed file='{}'", JoinPath(dir_, file));
  listener_.OnManifestRemoved(file);
}

void ManifestSource::Rename(const std::string& from, const std::string& to) {
  auto it = files_.find(from);
  if (it == files_.end()) {
    Load(to);  // Nothing was known of `from` (e.g. it was being written): just read `to`.
    return;
  }
  Remove(to);  // Replaced by the rename, if it existed.
  FileState state = std::move(it->second);
  files_.erase(it);
  if (state.declared) {
    if (auto owner = owners_.find(state.declared->name);
        owner != owners_.end() && owner->second == from) {
      owner->second = to;
    }
  }
  files_[to] = std::move(state);
  Log(kComponent)
      .info("manifest_renamed from='{}' to='{}'", JoinPath(dir_, from), JoinPath(dir_, to));
  listener_.OnManifestRenamed(from, to);
  Load(to);
}

}  // namespace stagehand::manifests
