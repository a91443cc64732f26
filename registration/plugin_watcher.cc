#include "registration/plugin_watcher.h"

#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <absl/strings/str_cat.h>
#include <absl/time/clock.h>
#include <absl/time/time.h>
#include <spdlog/spdlog.h>

#include "base/file_io.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/paths.h"
#include "base/task_runner.h"
#include "base/time_format.h"
#include "base/unix_socket.h"
#include "registration/plugin_info_validation.h"

namespace stagehand::registration {
namespace {

constexpr LogComponent kComponent = LogComponent::kRegistration;

constexpr uint32_t kWatchMask = IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

// The socket's inode, or 0 when `path` is not a socket (or gone).
ino_t SocketInode(const std::string& path) {
  struct stat st {};

  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return 0;
  }
  return st.st_ino;
}

bool Ignored(std::string_view name) {
  return name.empty() || name.starts_with('.');
}

}  // namespace

// One registration socket, from first sight until it is removed or the watcher stops. Its
// calls run on a TaskRunner of its own (a thread only while a call is due), one step at a time:
// a registration attempt, or a probe once registered; the timer between steps is the loop's.
class PluginWatcher::Socket {
 public:
  Socket(std::string path, const WatcherOptions& options, Registry& registry, const Clock& clock,
         EventLoop& loop)
      : path_(std::move(path)),
        options_(options),
        registry_(registry),
        schedule_(clock, options.backoff),
        runner_(std::make_unique<TaskRunner>("sh-plugin")),
        timer_(loop, [this] { runner_->Post([this] { Step(); }); }) {}

  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Waits for a call in flight (Stop cancels it).
  ~Socket() {
    Stop();
    timer_.Close();
    runner_.reset();
  }

  void Begin() { timer_.ScheduleNow(); }

  // Cancels the calls in flight and schedules nothing more. Thread-safe.
  void Stop() { stop_.request_stop(); }

  // A call is queued or in flight.
  bool Busy() const { return !runner_->idle(); }

 private:
  // On the runner.
  void Step() {
    const std::stop_token token = stop_.get_token();
    if (token.stop_requested()) {
      return;
    }
    if (registered_) {
      if (Probe(token)) {
        timer_.ScheduleAfter(options_.probe_period);
      } else if (!token.stop_requested()) {
        registered_ = false;
        timer_.ScheduleNow();
      }
      return;
    }
    const absl::Status registered = RegisterOnce(token, name_, endpoint_);
    if (token.stop_requested()) {
      return;
    }
    if (registered.ok()) {
      schedule_.Succeeded();
      last_error_.clear();
      registered_ = true;
      timer_.ScheduleAfter(options_.probe_period);
      return;
    }
    const auto delay = schedule_.Failed();
    RegistrationAttempt attempt;
    attempt.set_socket_path(path_);
    attempt.set_plugin_name(name_);
    attempt.set_failures(schedule_.failures());
    attempt.set_last_error(std::string(registered.message()));
    attempt.set_next_retry(FormatRfc3339(std::chrono::system_clock::now() + delay));
    registry_.RecordFailure(std::move(attempt), token);
    // One line per change of reason, not one per retry.
    if (registered.message() != last_error_) {
      Log(kComponent)
          .warn("plugin registration failed socket='{}' driver='{}': {}; retrying with backoff",
                path_, name_, registered);
      last_error_ = std::string(registered.message());
    } else {
      Log(kComponent)
          .debug("plugin registration failed again socket='{}' failures={} retry_in={}ms", path_,
                 schedule_.failures(), delay.count());
    }
    timer_.ScheduleAfter(std::chrono::duration_cast<std::chrono::milliseconds>(delay));
  }

  absl::Status RegisterOnce(const std::stop_token& token, std::string& name,
                            std::shared_ptr<grpc::Channel>& endpoint_channel) {
    const CallTimeouts& t = options_.timeouts;
    SH_RETURN_IF_ERROR(CheckListening(path_));
    SH_ASSIGN_OR_RETURN(auto registration, DialUnix(path_, t.dial));
    SH_ASSIGN_OR_RETURN(auto info, GetInfo(registration, t.get_info, token));
    name = info.name();
    RegisteredPlugin plugin;
    absl::Status result = Handshake(token, info, endpoint_channel, plugin);
    if (token.stop_requested()) {
      return absl::CancelledError("registration socket removed");
    }
    // Tell the plugin, as the kubelet does; a plugin that cannot hear it is still usable.
    const std::string error = result.ok() ? "" : std::string(result.message());
    if (auto told = NotifyRegistrationStatus(registration, result.ok(), error, t.notify, token);
        !told.ok()) {
      Log(kComponent)
          .warn("plugin socket='{}' did not take its registration status: {}", path_, told);
    }
    if (result.ok()) {
      Log(kComponent)
          .info("plugin registered driver='{}' endpoint='{}' version={} node_id='{}' socket='{}'",
                name, plugin.endpoint(), plugin.version(), plugin.node_id(), path_);
    }
    return result;
  }

  // Fills `plugin` and adds it to the registry.
  absl::Status Handshake(const std::stop_token& token, const pluginregistration::PluginInfo& info,
                         std::shared_ptr<grpc::Channel>& endpoint_channel,
                         RegisteredPlugin& plugin) {
    const CallTimeouts& t = options_.timeouts;
    SH_RETURN_IF_ERROR(ValidatePluginInfo(info));
    SH_ASSIGN_OR_RETURN(std::string endpoint, EndpointSocketPath(info.endpoint()));
    plugin.set_name(info.name());
    plugin.set_socket_path(path_);
    plugin.set_endpoint(endpoint);
    const std::vector<std::string> versions(info.supported_versions().begin(),
                                            info.supported_versions().end());
    SH_ASSIGN_OR_RETURN(std::string version, HighestSupportedVersion(versions));
    plugin.set_version(version);
    for (const auto& v : versions) {
      plugin.add_supported_versions(v);
    }
    // A healthy holder of the same name wins; say so before dialling anything.
    if (auto holder = registry_.Find(info.name());
        holder && holder->socket_path() != path_ && holder->healthy()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "driver '", info.name(), "' is already registered through '", holder->socket_path(),
          "' and healthy; remove one of the two registration sockets"));
    }
    if (auto s = CheckListening(endpoint); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("endpoint: ", s.message()));
    }
    SH_ASSIGN_OR_RETURN(endpoint_channel, DialUnix(endpoint, t.dial));
    SH_RETURN_IF_ERROR(QueryDriver(endpoint_channel, t, token, plugin));
    plugin.set_healthy(true);
    plugin.set_registered_at(FormatRfc3339(std::chrono::system_clock::now()));
    return registry_.Add(plugin, token);
  }

  // One probe of a registered plugin; false when its registration is gone (or stopped).
  bool Probe(const std::stop_token& token) {
    const absl::Status probe = ProbePlugin(endpoint_, options_.timeouts.call, token);
    if (token.stop_requested()) {
      return false;
    }
    auto changed = registry_.SetHealth(path_, probe.ok(),
                                       probe.ok() ? "" : std::string(probe.message()), token);
    if (!changed.ok()) {
      Log(kComponent)
          .info(
              "plugin driver='{}' socket='{}' no longer holds its registration; registering again",
              name_, path_);
      return false;
    }
    if (*changed && probe.ok()) {
      Log(kComponent).info("plugin healthy again driver='{}'", name_);
    } else if (*changed) {
      Log(kComponent).warn("plugin unhealthy driver='{}': {}", name_, probe);
    }
    return true;
  }

  std::string path_;
  const WatcherOptions& options_;
  Registry& registry_;
  std::stop_source stop_;
  // The runner's, one step at a time.
  RetrySchedule schedule_;
  std::string last_error_;
  bool registered_ = false;
  std::string name_;
  std::shared_ptr<grpc::Channel> endpoint_;
  // Declared last: the destructor closes the timer, then joins the runner.
  std::unique_ptr<TaskRunner> runner_;
  LoopTimer timer_;
};

absl::StatusOr<std::unique_ptr<PluginWatcher>> PluginWatcher::Start(WatcherOptions options,
                                                                    Registry& registry,
                                                                    const Clock& clock,
                                                                    EventLoop* loop) {
  if (!IsCleanAbsolutePath(options.registry_dir)) {
    return absl::InvalidArgumentError(absl::StrCat("registration directory '", options.registry_dir,
                                                   "' must be an absolute path"));
  }
  SH_ASSIGN_OR_RETURN(DirWatch watch, DirWatch::Create());
  std::unique_ptr<PluginWatcher> watcher(
      new PluginWatcher(std::move(options), registry, clock, std::move(watch)));
  if (loop == nullptr) {
    watcher->own_loop_ = std::make_unique<LoopThread>();
    loop = &watcher->own_loop_->loop();
  }
  watcher->loop_ = loop;
  PluginWatcher* self = watcher.get();
  watcher->rewatch_ = std::make_unique<LoopTimer>(*loop, [self] {
    if (auto s = self->Watch(); !s.ok()) {
      Log(kComponent).debug("registration directory still unavailable: {}", s);
      self->rewatch_->ScheduleAfter(std::chrono::seconds(1));
    }
  });
  watcher->reaper_ = std::make_unique<LoopTimer>(*loop, [self] { self->Reap(); });
  SH_RETURN_IF_ERROR(watcher->Watch());
  SH_ASSIGN_OR_RETURN(watcher->loop_watch_, LoopWatch::Start(*loop, watcher->watch_.Fd(), [self] {
                        self->HandleInotify();
                        if (!self->watching_) {
                          self->rewatch_->ScheduleNow();
                        }
                      }));
  return watcher;
}

PluginWatcher::PluginWatcher(WatcherOptions options, Registry& registry, const Clock& clock,
                             DirWatch watch)
    : options_(std::move(options)), registry_(registry), clock_(clock), watch_(std::move(watch)) {}

PluginWatcher::~PluginWatcher() {
  // Nothing of the loop's runs after these: the rest is this thread's.
  loop_watch_.reset();
  rewatch_.reset();
  reaper_.reset();
  for (auto& [path, entry] : sockets_) {
    entry.socket->Stop();
  }
  for (auto& socket : retiring_) {
    socket->Stop();
  }
  sockets_.clear();  // Joins their calls, cancelled.
  retiring_.clear();
}

absl::Status PluginWatcher::Watch() {
  dir_wd_ = -1;  // Until the new watch is in place: events of an old one are ignored.
  SH_RETURN_IF_ERROR(MakeDirs(options_.registry_dir, 0700));
  SH_ASSIGN_OR_RETURN(dir_wd_, watch_.Add(options_.registry_dir, kWatchMask));
  watching_ = true;
  Rescan();  // After the watch is in place, so that nothing created in between is missed.
  Log(kComponent).info("watching for plugins dir='{}'", options_.registry_dir);
  return absl::OkStatus();
}

void PluginWatcher::HandleInotify() {
  for (auto events = watch_.Read(); !events.empty(); events = watch_.Read()) {
    for (const DirWatch::Event& event : events) {
      if (event.wd != dir_wd_ && (event.mask & IN_Q_OVERFLOW) == 0) {
        continue;  // A late event of a watch we replaced.
      }
      if ((event.mask & IN_Q_OVERFLOW) != 0) {
        Log(kComponent)
            .warn("plugin watcher: inotify queue overflowed; rescanning '{}'",
                  options_.registry_dir);
        Rescan();
        continue;
      }
      if ((event.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0) {
        if (watching_) {
          Log(kComponent)
              .error(
                  "registration directory '{}' was removed; deregistering its plugins and "
                  "re-creating it",
                  options_.registry_dir);
          if ((event.mask & IN_IGNORED) == 0) {
            watch_.Remove(dir_wd_);
          }
          watching_ = false;
          StopAll();
        }
        continue;
      }
      if (event.name.empty()) {
        continue;
      }
      const std::string& name = event.name;
      if (Ignored(name)) {
        continue;
      }
      const std::string path = JoinPath(options_.registry_dir, name);
      if ((event.mask & (IN_DELETE | IN_MOVED_FROM)) != 0) {
        StopSocket(path);
      } else if ((event.mask & (IN_CREATE | IN_MOVED_TO)) != 0) {
        const ino_t inode = SocketInode(path);
        auto it = sockets_.find(path);
        if (it != sockets_.end() && it->second.inode == inode) {
          continue;  // Seen by the scan already.
        }
        StopSocket(path);
        if (inode != 0) {
          StartSocket(path, inode);
        }
      }
    }
  }
}

void PluginWatcher::Rescan() {
  std::map<std::string, ino_t> present;
  if (DIR* dir = opendir(options_.registry_dir.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      if (Ignored(entry->d_name)) {
        continue;
      }
      const std::string path = JoinPath(options_.registry_dir, entry->d_name);
      if (const ino_t inode = SocketInode(path); inode != 0) {
        present[path] = inode;
      }
    }
    closedir(dir);
  }
  std::vector<std::string> gone;
  for (const auto& [path, entry] : sockets_) {
    auto it = present.find(path);
    if (it == present.end() || it->second != entry.inode) {
      gone.push_back(path);
    }
  }
  for (const auto& path : gone) {
    StopSocket(path);
  }
  for (const auto& [path, inode] : present) {
    if (!sockets_.contains(path)) {
      StartSocket(path, inode);
    }
  }
}

void PluginWatcher::StartSocket(const std::string& path, ino_t inode) {
  Log(kComponent).debug("registration socket found '{}'", path);
  Entry entry;
  entry.inode = inode;
  entry.socket = std::make_unique<Socket>(path, options_, registry_, clock_, *loop_);
  entry.socket->Begin();
  sockets_[path] = std::move(entry);
}

void PluginWatcher::StopSocket(const std::string& path) {
  auto it = sockets_.find(path);
  if (it == sockets_.end()) {
    return;
  }
  // Stop first, then remove: a handshake that is about to add its plugin either sees the stop
  // under the registry's lock or is removed right here.
  it->second.socket->Stop();
  if (auto removed = registry_.RemoveBySocket(path)) {
    Log(kComponent)
        .info("plugin deregistered driver='{}' socket='{}' (socket removed)", removed->name(),
              path);
  }
  // Destroyed once its cancelled call returned: the loop never waits for a plugin.
  retiring_.push_back(std::move(it->second.socket));
  sockets_.erase(it);
  reaper_->ScheduleNow();
}

void PluginWatcher::StopAll() {
  std::vector<std::string> paths;
  for (const auto& [path, entry] : sockets_) {
    paths.push_back(path);
  }
  for (const auto& path : paths) {
    StopSocket(path);
  }
}

void PluginWatcher::Reap() {
  std::erase_if(retiring_, [](const std::unique_ptr<Socket>& s) { return !s->Busy(); });
  if (!retiring_.empty()) {
    reaper_->ScheduleAfter(std::chrono::milliseconds(200));
  }
}

}  // namespace stagehand::registration
