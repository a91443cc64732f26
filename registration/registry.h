#pragma once

// The driver registry: which CSI plugins this node has, where to reach them, what they can do and
// whether they answer. Filled by the PluginWatcher; read by the reconciler and the status files.

#include <functional>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "proto/state.pb.h"

namespace stagehand::registration {

using state::v1::RegisteredPlugin;
using state::v1::RegistrationAttempt;

// Thread-safe. The listener runs after every change, on the thread that made it, without the
// registry's lock held; it must be thread-safe itself.
class Registry {
 public:
  using Listener = std::function<void()>;

  Registry() = default;
  ~Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // REQUIRES: called before any other thread uses the registry.
  void SetListener(Listener listener) { listener_ = std::move(listener); }

  // Registers `plugin` (keyed by name). Cancelled when `token` has been stopped (checked under the
  // lock, so a socket removed during its handshake can never leave a registration behind).
  // AlreadyExists when another socket holds the name and is healthy; an unhealthy holder is
  // replaced. Clears the socket's pending attempt.
  absl::Status Add(RegisteredPlugin plugin, const std::stop_token& token);

  // Drops whatever `socket_path` registered or attempted. Returns the plugin it had registered.
  std::optional<RegisteredPlugin> RemoveBySocket(const std::string& socket_path);

  // Updates the health of the plugin registered through `socket_path`. NotFound when that socket
  // no longer holds a registration (it was replaced or removed). Returns whether health changed.
  // A stopped `token` (the socket went away) changes nothing: Cancelled.
  absl::StatusOr<bool> SetHealth(const std::string& socket_path, bool healthy,
                                 const std::string& error,
                                 const std::stop_token& token = std::stop_token());

  // Records a failed handshake of `socket_path`, unless `token` has been stopped.
  void RecordFailure(RegistrationAttempt attempt, const std::stop_token& token);

  std::optional<RegisteredPlugin> Find(const std::string& name) const;
  std::vector<RegisteredPlugin> List() const;
  state::v1::PluginRegistryStatus Snapshot() const;

 private:
  void Notify() const;

  mutable Mutex mu_;
  std::map<std::string, RegisteredPlugin> plugins_ ABSL_GUARDED_BY(mu_);      // By name.
  std::map<std::string, RegistrationAttempt> attempts_ ABSL_GUARDED_BY(mu_);  // By socket.
  Listener listener_;
};

}  // namespace stagehand::registration
