#include "registration/registry.h"

#include <absl/strings/str_cat.h>

namespace stagehand::registration {

absl::Status Registry::Add(RegisteredPlugin plugin, const std::stop_token& token) {
  {
    MutexLock lock(mu_);
    if (token.stop_requested()) {
      return absl::CancelledError(
          absl::StrCat("registration socket '", plugin.socket_path(), "' went away"));
    }
    auto it = plugins_.find(plugin.name());
    if (it != plugins_.end() && it->second.socket_path() != plugin.socket_path() &&
        it->second.healthy()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "driver '", plugin.name(), "' is already registered through '", it->second.socket_path(),
          "' and healthy; remove one of the two registration sockets"));
    }
    // A socket registers one driver: drop what it registered before under another name.
    for (auto p = plugins_.begin(); p != plugins_.end();) {
      if (p->second.socket_path() == plugin.socket_path() && p->first != plugin.name()) {
        p = plugins_.erase(p);
      } else {
        ++p;
      }
    }
    attempts_.erase(plugin.socket_path());
    plugins_[plugin.name()] = std::move(plugin);
  }
  Notify();
  return absl::OkStatus();
}

std::optional<RegisteredPlugin> Registry::RemoveBySocket(const std::string& socket_path) {
  std::optional<RegisteredPlugin> removed;
  bool changed = false;
  {
    MutexLock lock(mu_);
    changed = attempts_.erase(socket_path) > 0;
    for (auto it = plugins_.begin(); it != plugins_.end(); ++it) {
      if (it->second.socket_path() == socket_path) {
        removed = std::move(it->second);
        plugins_.erase(it);
        changed = true;
        break;
      }
    }
  }
  if (changed) {
    Notify();
  }
  return removed;
}

absl::StatusOr<bool> Registry::SetHealth(const std::string& socket_path, bool healthy,
                                         const std::string& error, const std::stop_token& token) {
  bool changed = false;
  {
    MutexLock lock(mu_);
    if (token.stop_requested()) {
      return absl::CancelledError("registration socket removed");
    }
    RegisteredPlugin* found = nullptr;
    for (auto& [name, plugin] : plugins_) {
      if (plugin.socket_path() == socket_path) {
        found = &plugin;
        break;
      }
    }
    if (found == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("socket '", socket_path, "' holds no registration any more"));
    }
    changed = found->healthy() != healthy || found->last_error() != error;
    found->set_healthy(healthy);
    found->set_last_error(error);
  }
  if (changed) {
    Notify();
  }
  return changed;
}

void Registry::RecordFailure(RegistrationAttempt attempt, const std::stop_token& token) {
  {
    MutexLock lock(mu_);
    if (token.stop_requested()) {
      return;
    }
    attempts_[attempt.socket_path()] = std::move(attempt);
  }
  Notify();
}

std::optional<RegisteredPlugin> Registry::Find(const std::string& name) const {
  MutexLock lock(mu_);
  auto it = plugins_.find(name);
  if (it == plugins_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<RegisteredPlugin> Registry::List() const {
  MutexLock lock(mu_);
  std::vector<RegisteredPlugin> out;
  out.reserve(plugins_.size());
  for (const auto& [name, plugin] : plugins_) {
    out.push_back(plugin);
  }
  return out;
}

state::v1::PluginRegistryStatus Registry::Snapshot() const {
  MutexLock lock(mu_);
  state::v1::PluginRegistryStatus status;
  for (const auto& [name, plugin] : plugins_) {
    *status.add_plugins() = plugin;
  }
  for (const auto& [socket, attempt] : attempts_) {
    *status.add_pending() = attempt;
  }
  return status;
}

void Registry::Notify() const {
  if (listener_) {
    listener_();
  }
}

}  // namespace stagehand::registration
