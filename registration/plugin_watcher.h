#pragma once

// The agent side of plugin registration: watches a registry directory (inotify) for the
// registration sockets of CSI node plugins, as the kubelet's plugin manager does, and keeps the
// Registry in step with it.
//
// Per socket, on a thread of its own that exists only while the socket has a call to make: GetInfo
// (through a dial bounded by `timeouts.dial`, the call by `timeouts.get_info`); validation; dial
// the endpoint; Probe, GetPluginInfo, NodeGetCapabilities, NodeGetInfo; add to the registry;
// NotifyRegistrationStatus. A failure is told to the plugin (NotifyRegistrationStatus(false,
// reason)) and retried with exponential backoff (the kubelet never retries; we do). Once registered
// the plugin is probed every `probe_period` and marked unhealthy / healthy again. A removed socket
// deregisters its plugin, also in the middle of a handshake; a re-created socket is a new
// registration. Dotfiles and anything that is not a socket are ignored.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/dir_watch.h"
#include "base/event_loop.h"
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
  // there. The directory is followed on `loop`, or on a thread of the watcher's own when it is
  // null. `registry`, `clock` and `loop` must outlive the watcher.
  static absl::StatusOr<std::unique_ptr<PluginWatcher>> Start(WatcherOptions options,
                                                              Registry& registry,
                                                              const Clock& clock = RealClock::Get(),
                                                              EventLoop* loop = nullptr);

  PluginWatcher(const PluginWatcher&) = delete;
  PluginWatcher& operator=(const PluginWatcher&) = delete;

  // Stops watching and cancels in-flight handshakes; registrations stay in the registry.
  ~PluginWatcher();

 private:
  class Socket;  // One registration socket: its handshake, retries and probes.

  struct Entry {
    ino_t inode = 0;
    std::unique_ptr<Socket> socket;
  };

  PluginWatcher(WatcherOptions options, Registry& registry, const Clock& clock, DirWatch watch);

  absl::Status Watch();
  void HandleInotify();
  void Rescan();
  void StartSocket(const std::string& path, ino_t inode);
  void StopSocket(const std::string& path);
  void StopAll();
  // Destroys the stopped sockets whose last call is over; the rest are tried again later.
  void Reap();

  WatcherOptions options_;
  Registry& registry_;
  const Clock& clock_;
  DirWatch watch_;
  int dir_wd_ = -1;
  bool watching_ = false;
  // The rest is the loop's.
  std::map<std::string, Entry> sockets_;           // By socket path.
  std::vector<std::unique_ptr<Socket>> retiring_;  // Stopped, maybe still in a call.
  std::unique_ptr<LoopThread> own_loop_;           // When Start was given no loop.
  EventLoop* loop_ = nullptr;
  std::unique_ptr<LoopTimer> rewatch_;  // Re-creates a lost directory once a second.
  std::unique_ptr<LoopTimer> reaper_;
  std::unique_ptr<LoopWatch> loop_watch_;
};

}  // namespace stagehand::registration
