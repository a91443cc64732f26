#include "session/keeper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <optional>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "base/service_notify.h"
#include "base/spawn.h"
#include "base/unique_fd.h"

namespace stagehand::session {
namespace {

using Clock = std::chrono::steady_clock;

// Variables of the protocol: never passed on from the keeper's own environment.
bool IsProtocolVariable(std::string_view entry) {
  for (std::string_view name : {"NOTIFY_SOCKET=", "LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES=",
                                "WATCHDOG_USEC=", "WATCHDOG_PID="}) {
    if (entry.starts_with(name)) {
      return true;
    }
  }
  return false;
}

void Say(const std::string& line) {
  // stderr is the log (the journal, or the agent's stderr): one line per event.
  (void)std::fprintf(stderr, "stagehand-session keeper: %s\n", line.c_str());
}

class Keeper {
 public:
  Keeper(const KeeperOptions& options, KeeperAdoption adoption)
      : options_(options), adoption_(std::move(adoption)) {}

  int Run() {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    signals_.Reset(signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
    timer_.Reset(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    address_ =
        absl::StrCat("@stagehand-keeper/", getpid(), "/", Clock::now().time_since_epoch().count());
    auto socket = NotifySocket::Bind(address_);
    null_.Reset(open("/dev/null", O_RDWR | O_CLOEXEC));
    if (!signals_ || !timer_ || !socket.ok() || !null_) {
      Say("cannot set up (signalfd, timerfd, notification socket or /dev/null)");
      return 1;
    }
    notify_ = std::move(*socket);
    Pin();
    if (adoption_.pid > 0) {
      Adopt();
    } else {
      if (!Start(options_.stdin_fd, options_.stdout_fd)) {
        return 1;
      }
      // The first start's pipes are the program's alone from here: whoever reads them must see
      // them close when it dies.
      (void)dup2(null_.Get(), options_.stdin_fd);
      (void)dup2(null_.Get(), options_.stdout_fd);
    }
    while (true) {
      if (std::optional<int> done = Turn()) {
        return *done;
      }
    }
  }

 private:
  // Keeps the running process of the adoption from here on, and says where it listens.
  void Adopt() {
    child_ = adoption_.pid;
    pidfd_ = std::move(adoption_.pidfd);
    store_ = std::move(adoption_.store);
    adopted_ = true;
    last_ping_ = Clock::now();
    Say(absl::StrCat("keeping pid ", child_, ", whose keeper died"));
    if (adoption_.ready) {
      const std::string hello = absl::StrCat(getpid(), " ", address_, "\n");
      (void)!write(adoption_.ready.Get(), hello.data(), hello.size());
      adoption_.ready.Reset();
    }
  }

  // Signals the program through its pidfd (an adopted process is not our child: its pid could
  // be another's once it is gone).
  void Signal(int signal) {
    (void)syscall(SYS_pidfd_send_signal, pidfd_.Get(), signal, nullptr, 0);
  }

  // One wait and what it brought; the exit status once the keeper is done.
  std::optional<int> Turn() {
    std::array<pollfd, 4> fds{{{signals_.Get(), POLLIN, 0},
                               {notify_.Fd(), POLLIN, 0},
                               {timer_.Get(), POLLIN, 0},
                               {pidfd_.Get(), POLLIN, 0}}};
    const nfds_t n = pidfd_ ? 4 : 3;
    int timeout = -1;
    if (pidfd_ && options_.watchdog.count() > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          last_ping_ + options_.watchdog - Clock::now());
      timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    if (poll(fds.data(), n, timeout) < 0 && errno != EINTR) {
      Say(absl::StrCat("poll: ", errno));
      return 1;
    }
    if (fds[1].revents != 0) {
      while (auto message = notify_.Receive()) {
        Take(std::move(*message));
      }
    }
    if (fds[0].revents != 0) {
      std::array<char, sizeof(signalfd_siginfo)> info{};
      while (read(signals_.Get(), info.data(), info.size()) > 0) {
      }
      stopping_ = true;
      if (!pidfd_) {
        return 0;  // Between two starts: nothing to stop.
      }
      Signal(SIGTERM);
    }
    if (n == 4 && fds[3].revents != 0) {
      return Reap();
    }
    if (pidfd_ && options_.watchdog.count() > 0 && Clock::now() >= last_ping_ + options_.watchdog) {
      Say(absl::StrCat("pid ", child_, " sent no WATCHDOG=1 for ", options_.watchdog.count(),
                       " ms: killing it"));
      Signal(SIGKILL);
      last_ping_ = Clock::now() + std::chrono::hours(1);  // Once; its exit comes next.
    }
    if (fds[2].revents != 0) {
      uint64_t expirations = 0;
      (void)!read(timer_.Get(), &expirations, sizeof(expirations));
      if (!stopping_ && !Start(null_.Get(), null_.Get())) {
        return 1;
      }
    }
    return std::nullopt;
  }

  // A notification of the program (others are ignored, as systemd's NotifyAccess=main does).
  void Take(NotifyMessage message) {
    if (message.sender_pid != child_) {
      return;
    }
    const auto field = [&](const char* key) {
      auto it = message.fields.find(key);
      return it == message.fields.end() ? std::string() : it->second;
    };
    const std::string name = field("FDNAME").empty() ? "stored" : field("FDNAME");
    if (field("FDSTOREREMOVE") == "1") {
      store_.erase(name);
    }
    if (field("FDSTORE") == "1" && !message.fds.empty()) {
      store_[name] = std::move(message.fds);
    }
    if (field("WATCHDOG") == "1") {
      last_ping_ = Clock::now();
    }
    int exit_status = 0;
    if (field("STOPPING") == "1" && absl::SimpleAtoi(field("EXIT_STATUS"), &exit_status)) {
      exit_status_ = exit_status;
    }
  }

  // The program exited: its status, or a restart.
  std::optional<int> Reap() {
    int status = 0;
    if (adopted_) {
      // Not our child: what it said before it ended is all there is.
      status = exit_status_ ? W_EXITCODE(*exit_status_, 0) : W_EXITCODE(0, SIGKILL);
      adopted_ = false;
    } else {
      while (waitpid(child_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pidfd_.Reset();
    const pid_t gone = std::exchange(child_, 0);
    if (stopping_) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    }
    if (WIFEXITED(status)) {
      return WEXITSTATUS(status);  // Its own decision: not restarted.
    }
    const int signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    const auto now = Clock::now();
    while (!starts_.empty() && now - starts_.front() > options_.start_limit_interval) {
      starts_.pop_front();
    }
    if (static_cast<int>(starts_.size()) >= options_.start_limit_burst) {
      Say(absl::StrCat("pid ", gone, " died of signal ", signal, "; started ", starts_.size(),
                       " times within ", options_.start_limit_interval.count(), " s: giving up"));
      return 1;
    }
    Say(absl::StrCat("pid ", gone, " died of signal ", signal, "; starting it again"));
    itimerspec spec{};
    const auto delay = std::max(options_.restart_delay, std::chrono::milliseconds(1));
    spec.it_value.tv_sec = static_cast<time_t>(delay.count() / 1000);
    spec.it_value.tv_nsec = static_cast<long>((delay.count() % 1000) * 1'000'000);
    timerfd_settime(timer_.Get(), 0, &spec, nullptr);
    return std::nullopt;
  }

  // Every start runs the file that argv[0] named at the keeper's start, through a descriptor
  // (/proc/self/fd/N resolves in the child): a binary replaced on disk since (an upgrade, a
  // broken copy) never changes what a restart runs. Far above the descriptors Start() moves to
  // 3, 4, ... Without /proc, the path.
  void Pin() {
    UniqueFd file(open(options_.argv[0].c_str(), O_RDONLY | O_CLOEXEC));
    if (file && access("/proc/self/fd", X_OK) == 0) {
      program_.Reset(fcntl(file.Get(), F_DUPFD_CLOEXEC, 512));
    }
    program_path_ = program_ ? absl::StrCat("/proc/self/fd/", program_.Get()) : options_.argv[0];
  }

  bool Start(int stdin_fd, int stdout_fd) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      if (!IsProtocolVariable(entry) &&
          !options_.env.contains(std::string(entry.substr(0, entry.find('='))))) {
        env.emplace_back(entry);
      }
    }
    env.push_back(absl::StrCat("NOTIFY_SOCKET=", address_));
    if (options_.watchdog.count() > 0) {
      env.push_back(absl::StrCat("WATCHDOG_USEC=", options_.watchdog.count() * 1000));
    }
    for (const auto& [key, value] : options_.env) {
      env.push_back(absl::StrCat(key, "=", value));
    }
    // Stored descriptors go to 3, 4, ...: first out of that range (close-on-exec copies), so
    // that no dup2 below overwrites one still to be copied.
    std::vector<UniqueFd> high;
    std::vector<std::string> names;
    for (const auto& [name, fds] : store_) {
      for (const UniqueFd& fd : fds) {
        high.emplace_back(fcntl(fd.Get(), F_DUPFD_CLOEXEC, 64));
        names.push_back(name);
      }
    }
    if (!high.empty()) {
      env.push_back(absl::StrCat("LISTEN_FDS=", high.size()));
      env.push_back(absl::StrCat("LISTEN_FDNAMES=", absl::StrJoin(names, ":")));
    }
    SpawnActions actions;
    SpawnAttributes attributes;
    int rc = actions.ok() ? attributes.error() : ENOMEM;
    rc = rc != 0 ? rc : posix_spawn_file_actions_adddup2(actions.get(), stdin_fd, STDIN_FILENO);
    rc = rc != 0 ? rc : posix_spawn_file_actions_adddup2(actions.get(), stdout_fd, STDOUT_FILENO);
    for (size_t i = 0; i < high.size() && rc == 0; ++i) {
      rc = high[i] ? posix_spawn_file_actions_adddup2(actions.get(), high[i].Get(),
                                                      static_cast<int>(3 + i))
                   : EBADF;
    }
    std::vector<char*> cargv = SpawnArgv(options_.argv);
    std::vector<char*> cenv = SpawnArgv(env);
    pid_t pid = 0;
    rc = rc != 0 ? rc
                 : posix_spawn(&pid, program_path_.c_str(), actions.get(), attributes.get(),
                               cargv.data(), cenv.data());
    if (rc != 0) {
      Say(absl::StrCat("cannot start ", options_.argv[0], ": error ", rc));
      return false;
    }
    child_ = pid;
    exit_status_.reset();
    pidfd_.Reset(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
    last_ping_ = Clock::now();
    starts_.push_back(Clock::now());
    return true;
  }

  const KeeperOptions& options_;
  KeeperAdoption adoption_;
  UniqueFd program_;
  std::string program_path_;
  UniqueFd signals_;
  UniqueFd timer_;
  UniqueFd null_;
  NotifySocket notify_;
  std::string address_;
  std::map<std::string, std::vector<UniqueFd>> store_;
  pid_t child_ = 0;
  UniqueFd pidfd_;
  Clock::time_point last_ping_;
  std::deque<Clock::time_point> starts_;
  bool stopping_ = false;
  bool adopted_ = false;            // child_ was adopted, not started: not our child.
  std::optional<int> exit_status_;  // What the program said with STOPPING=1.
};

}  // namespace

int RunKeeper(const KeeperOptions& options, KeeperAdoption adoption) {
  if (options.argv.empty()) {
    return 1;
  }
  // Never die of its surroundings: its stderr is often a pipe (a container's log, `agent | cat`)
  // whose reader may go away, and a hangup is not meant for it (it has no terminal of its own).
  // Its program gets SIGPIPE back at its default (base/spawn.h) and decides for itself.
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  Keeper keeper(options, std::move(adoption));
  return keeper.Run();
}

}  // namespace stagehand::session
