#pragma once

// The agent side of plugin registration: watches a registry directory (inotify) for the
// registration sockets of CSI node plugins, as the kubelet's plugin manager does, and keeps the
// Registry in step with it.
//
// Per socket, on its own worker thread: GetInfo (through a dial bounded by `timeouts.dial`, the
// call by `timeouts.get_info`); validation; dial the endpoint; Probe, GetPluginInfo,
// NodeGetCapabilities, NodeGetInfo; add to the registry; NotifyRegistrationStatus. A failure is
// told to the plugin (NotifyRegistrationStatus(false, reason)) and retried with exponential
// backoff (the kubelet never retries; we do). Once registered the plugin is probed every
// `probe_period` and marked unhealthy / healthy again. A removed socket deregisters its plugin,
// also in the middle of a handshake; a re-created socket is a new registration. Dotfiles and
// anything that is not a socket are ignored.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/dir_watch.h"
#include "base/status.h"
#include "registration/plugin_client.h"
#include "registration/registry.h"

namespace stagehand::registration {

struct WatcherOptions {
  std::string registry_dir;
  std::chrono::milliseconds probe_period{std::chrono::seconds(30)};
  CallTimeouts timeouts;
  BackoffPolicy backoff;
};

class PluginWatcher {
 public:
  // Creates the directory (0700) if needed, starts watching it and registers the sockets already
  // there. `registry` and `clock` must outlive the watcher.
  static absl::StatusOr<std::unique_ptr<PluginWatcher>> Start(
      WatcherOptions options, Registry& registry, const Clock& clock = RealClock::Get());

  PluginWatcher(const PluginWatcher&) = delete;
  PluginWatcher& operator=(const PluginWatcher&) = delete;

  // Stops watching and cancels in-flight handshakes; registrations stay in the registry.
  ~PluginWatcher();

 private:
  struct Worker {
    std::jthread thread;
    ino_t inode = 0;
    std::shared_ptr<std::atomic<bool>> done;
  };

  PluginWatcher(WatcherOptions options, Registry& registry, const Clock& clock, DirWatch watch);

  absl::Status Watch();
  void Loop(const std::stop_token& token);
  void HandleInotify();
  void Rescan();
  void StartWorker(const std::string& path, ino_t inode);
  void StopWorker(const std::string& path);
  void StopAll();
  void Reap();
  void Wake() const;

  WatcherOptions options_;
  Registry& registry_;
  const Clock& clock_;
  DirWatch watch_;  // Woken for shutdown and by finished workers.
  int dir_wd_ = -1;
  bool watching_ = false;
  std::map<std::string, Worker> workers_;  // By socket path; loop thread only.
  std::vector<Worker> retiring_;           // Cancelled, not joined yet; loop thread only.
  std::jthread loop_;
};

}  // namespace stagehand::registration
