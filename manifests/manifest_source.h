#pragma once

// Watches a directory of volume manifests (see agent/manifest.h) and reports what each file
// declares. Only `*.yaml` and `*.yml` files whose names do not start with '.' count (editor swap
// and backup files are ignored). A file is (re-)read when it is closed after writing or renamed
// into the directory, so both in-place edits and atomic replace-by-rename work; a symlinked
// manifest is read when the link itself changes, not when its target does. Replace files by
// rename for atomic updates: a file read while another writer is rewriting it in place can be
// reported as an error until that writer closes it (the listener keeps the last good spec).

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/dir_watch.h"
#include "base/event_loop.h"
#include "base/mutex.h"
#include "base/status.h"
#include "reconciler/volume_spec.h"

namespace stagehand::manifests {

// Receives the state of each manifest file. `file` is the file's name inside the directory
// ("pg.yaml"). Called on the source's loop (the files there at start: on the thread that called
// Start), one call at a time, and only when the file's state changes (an unchanged re-save is
// not reported again).
class ManifestListener {
 public:
  virtual ~ManifestListener() = default;

  // A file parsed and validated: `spec` is what it declares now.
  virtual void OnVolumeDeclared(const std::string& file, const reconciler::VolumeSpec& spec) = 0;

  // A file that does not parse or validate. The listener keeps the last good spec of that file.
  virtual void OnManifestError(const std::string& file, const absl::Status& error) = 0;

  // The file was removed (or renamed out of the directory): its volume is no longer declared.
  virtual void OnManifestRemoved(const std::string& file) = 0;

  // `from` was renamed to `to` within the directory (`mv a.yaml b.yaml`): what `from` declared
  // is now declared by `to`, with no moment in between where it is undeclared. (If `to` existed,
  // OnManifestRemoved(to) came first.) `to` is then read again and reported as usual.
  virtual void OnManifestRenamed(const std::string& from, const std::string& to) = 0;

  // The whole directory was listed and every file in it reported: what is not declared now is
  // not declared. Not called while the directory is missing or cannot be listed (then nothing
  // may be taken as undeclared). Called again after each later full listing.
  virtual void OnDirectoryListed() {}

  // Problem() changed (set, or cleared with nullopt). May come from the thread that called
  // Start as well as from the source's loop.
  virtual void OnProblem(const std::optional<std::string>& /*problem*/) {}
};

// Follows one directory. Volume names are unique across files: a file declaring a name that
// another file already declares gets OnManifestError ("volume 'x' is already declared in
// 'a.yaml'") and is not declared. It is not promoted when the other file goes away; it is
// re-read on its next change (touch it). If the directory itself is moved away, nothing is
// reported (its volumes stay declared) and the directory is watched for again from its parent;
// once it is back, files that are gone are reported removed.
class ManifestSource {
 public:
  // Watches `dir` and starts the thread, which first reports the files already there (sorted by
  // name, then OnDirectoryListed) and then follows changes; returns once those files have been
  // reported, so the listener knows the initial state. A missing `dir` is created (0755) when
  // `create_if_missing` (no volume can be lost then); else it is a Problem() and watched for
  // from its parent, and its files are reported once it appears with at least one manifest
  // (appearing empty, it stays a Problem; the same after it went away). Publish targets inside
  // `state_dir` are manifest errors. `listener` must outlive the source. InvalidArgument for
  // paths that are not absolute and normalised; errno-based codes if the watch cannot be set up.
  //
  // The changes are followed on `loop` (which must outlive the source), or on a thread of the
  // source's own when it is null; the files already there are reported on the calling thread.
  static absl::StatusOr<std::unique_ptr<ManifestSource>> Start(std::string dir,
                                                               std::string state_dir,
                                                               ManifestListener& listener,
                                                               bool create_if_missing = true,
                                                               EventLoop* loop = nullptr);

  // Why the directory's state is unknown now (missing, moved away, cannot be listed); nullopt
  // while it is followed. Thread-safe.
  std::optional<std::string> Problem() const;

  ManifestSource(const ManifestSource&) = delete;
  ManifestSource& operator=(const ManifestSource&) = delete;

  // Stops following; no callback runs after it returns.
  ~ManifestSource();

 private:
  struct FileState {
    std::optional<reconciler::VolumeSpec> declared;  // Last good spec reported.
    std::optional<std::string> error;                // Set while the file is in error.
  };

  ManifestSource(std::string dir, std::string state_dir, ManifestListener& listener,
                 DirWatch watch);

  absl::Status WatchDir();
  void HandleEvents();
  void DirLost();
  // Watches the parent until the directory (re)appears, then watches it and rescans.
  void WatchForDir();
  void SetProblem(std::optional<std::string> problem);
  void Rescan();
  void Load(const std::string& file);
  void Declare(const std::string& file, reconciler::VolumeSpec spec);
  void Fail(const std::string& file, const absl::Status& error);
  void Remove(const std::string& file);
  void Rename(const std::string& from, const std::string& to);

  const std::string dir_;
  const std::string state_dir_;
  ManifestListener& listener_;
  DirWatch watch_;      // Woken by the destructor.
  int dir_watch_ = -1;  // -1 while the directory is gone.
  int parent_watch_ = -1;
  std::string watched_ancestor_;  // What parent_watch_ watches: the nearest existing ancestor.
  // The rest is the loop's (and the starting thread's until the watch is on the loop).
  std::map<std::string, FileState> files_;     // By file name.
  std::map<std::string, std::string> owners_;  // Volume name -> file declaring it.
  // The directory was missing at start (with volumes to keep) or went away with files in it:
  // an empty listing does not count as complete until a manifest appears.
  bool hold_if_empty_ = false;
  mutable Mutex problem_mu_;
  std::optional<std::string> problem_ ABSL_GUARDED_BY(problem_mu_);
  std::unique_ptr<LoopThread> own_loop_;  // When Start was given no loop.
  std::unique_ptr<LoopWatch> loop_watch_;
};

}  // namespace stagehand::manifests
