#include "agent/daemon.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "agent/assembly.h"
#include "base/event_loop.h"
#include "base/file_io.h"
#include "base/lock_file.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/unique_fd.h"
#include "systemd/notifier.h"

namespace stagehand::agent {
namespace {

constexpr LogComponent kComponent = LogComponent::kAgent;

// The process around an assembly: its locks, the loop, the signals that stop it, and what
// systemd is told.
class AgentDaemon final : public Daemon {
 public:
  explicit AgentDaemon(DaemonOptions options) : options_(std::move(options)) {}

  AgentDaemon(const AgentDaemon&) = delete;
  AgentDaemon& operator=(const AgentDaemon&) = delete;

  ~AgentDaemon() override { assembly_.reset(); }

  // Every startup step; on error the destructor stops what was started.
  absl::Status Start();

  absl::Status Run() override;

 private:
  absl::Status TakeLocks();
  absl::Status WatchSignals();
  // On the loop: READY=1 once the first reconcile is done (or 60 s passed), STATUS= when the
  // summary changed, WATCHDOG=1 while alive; then schedules itself again.
  void Tick();

  const DaemonOptions options_;
  sigset_t signals_{};
  // The main thread's loop: signals, systemd notifications, the manifest and plugin watches,
  // the reconciler's rounds and every component's timers.
  std::unique_ptr<EventLoop> loop_;
  UniqueFd signal_fd_;
  std::unique_ptr<LoopWatch> signal_watch_;
  int signal_ = 0;
  const systemd::Notifier notifier_;
  std::unique_ptr<LoopTimer> tick_;
  std::chrono::steady_clock::time_point ready_deadline_;
  bool notified_ready_ = false;
  uint64_t seen_generation_ = 0;
  std::string last_status_;
  UniqueFd state_lock_;
  UniqueFd csi_socket_lock_;
  std::unique_ptr<Assembly> assembly_;
};

absl::Status AgentDaemon::TakeLocks() {
  const std::string csi_socket = CsiSocketPath(options_);
  for (const auto& dir : {options_.state_dir, options_.runtime_dir, ParentDir(csi_socket)}) {
    SH_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  }
  // Refuse to start rather than steal the socket or share the state of a running instance.
  SH_ASSIGN_OR_RETURN(state_lock_, LockFile(JoinPath(options_.state_dir, "stagehand.lock")));
  SH_ASSIGN_OR_RETURN(csi_socket_lock_, LockFile(absl::StrCat(csi_socket, ".lock")));
  return absl::OkStatus();
}

absl::Status AgentDaemon::WatchSignals() {
  // Signals are read from a signalfd on the loop; block them before any thread starts.
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  signal(SIGPIPE, SIG_IGN);
  SH_ASSIGN_OR_RETURN(loop_, EventLoop::Create());
  signal_fd_ = UniqueFd(signalfd(-1, &signals_, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_) {
    return ErrnoStatus(errno, "signalfd");
  }
  SH_ASSIGN_OR_RETURN(
      signal_watch_, LoopWatch::Start(*loop_, signal_fd_.Get(), [this] {
        signalfd_siginfo info{};
        while (read(signal_fd_.Get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
          signal_ = static_cast<int>(info.ssi_signo);
        }
        if (signal_ != 0) {
          loop_->Stop();
        }
      }));
  return absl::OkStatus();
}

absl::Status AgentDaemon::Start() {
  SH_RETURN_IF_ERROR(TakeLocks());
  SH_RETURN_IF_ERROR(WatchSignals());
  SH_ASSIGN_OR_RETURN(assembly_, StartAssembly(options_, *loop_));
  return absl::OkStatus();
}

void AgentDaemon::Tick() {
  if (!notified_ready_ &&
      (assembly_->Reconciled() || std::chrono::steady_clock::now() >= ready_deadline_)) {
    notifier_.Notify("READY=1");
    notified_ready_ = true;
  }
  // The summary is rebuilt only when something changed: idle costs next to nothing.
  const uint64_t generation = assembly_->Generation();
  if (generation != seen_generation_) {
    seen_generation_ = generation;
    std::string summary = assembly_->health().Summary();
    if (summary != last_status_) {
      notifier_.Notify(absl::StrCat("STATUS=", summary));
      last_status_ = std::move(summary);
    }
  }
  if (assembly_->health().Live().ok()) {
    notifier_.Notify("WATCHDOG=1");
  }
  // Often until ready (READY=1 soon after the first reconcile), then at the watchdog's pace.
  const timespec period = notifier_.LoopPeriod();
  const auto next = notified_ready_ ? std::chrono::seconds(period.tv_sec) +
                                          std::chrono::nanoseconds(period.tv_nsec)
                                    : std::chrono::nanoseconds(std::chrono::milliseconds(20));
  tick_->ScheduleAfter(std::chrono::ceil<std::chrono::milliseconds>(next));
}

absl::Status AgentDaemon::Run() {
  ready_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  tick_ = std::make_unique<LoopTimer>(*loop_, [this] { Tick(); });
  tick_->ScheduleNow();
  SH_RETURN_IF_ERROR(loop_->Run());
  tick_.reset();
  notifier_.Notify("STOPPING=1");
  Log(kComponent)
      .info("received signal {}, shutting down (volumes stay staged and published)",
            sigdescr_np(signal_));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(DaemonOptions options) {
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  SH_ASSIGN_OR_RETURN(DaemonOptions resolved,
                      ResolveDaemonOptions(std::move(options), host.data()));
  auto daemon = std::make_unique<AgentDaemon>(std::move(resolved));
  SH_RETURN_IF_ERROR(daemon->Start());
  return daemon;
}

int ExitCode(const absl::Status& status) {
  if (status.ok()) {
    return 0;
  }
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace stagehand::agent
