#include "iscsi/session_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/process.h"
#include "base/service_keeper.h"
#include "base/service_notify.h"
#include "base/unique_fd.h"
#include "iscsi/fuse_lun_server.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/session_conversions.h"
#include "proto/state.pb.h"

namespace stagehand::iscsi {
namespace {

using state::v1::SessionConfig;
using state::v1::SessionHandover;
using state::v1::SessionStatus;

absl::StatusOr<std::string> ReadAll(int fd) {
  std::string out;
  std::array<char, 4096> buf{};
  while (true) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, "read session config");
    }
    if (n == 0) {
      return out;
    }
    out.append(buf.data(), static_cast<size_t>(n));
  }
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;
    }
    done += static_cast<size_t>(n);
  }
}

// Points `fd` at /dev/null: the pipe behind it is closed, and the descriptor number (0 or 1) stays
// taken, so nothing opened later lands on stdin/stdout by accident.
void ReplaceWithDevNull(int fd) {
  const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) {
    close(fd);
    return;
  }
  if (devnull != fd) {
    dup3(devnull, fd, 0);
    close(devnull);
  }
}

SessionStatus::State ToProtoState(ServerState s) {
  switch (s) {
    case ServerState::kUp:
      return SessionStatus::UP;
    case ServerState::kReconnecting:
      return SessionStatus::RECONNECTING;
    case ServerState::kIdentityMismatch:
      return SessionStatus::IDENTITY_MISMATCH;
    case ServerState::kCapacityShrunk:
      return SessionStatus::CAPACITY_SHRUNK;
  }
  return SessionStatus::STATE_UNKNOWN;
}

class Session {
 public:
  Session(SessionConfig config, int ready_fd) : config_(std::move(config)), ready_fd_(ready_fd) {}

  // First start: the config came over the pipe; logs in and mounts.
  int Run() { return Serve(Start()); }

  // A successor: serves the FUSE connection of a process that ended, from what it left with
  // the manager.
  int RunTakeover(const SessionHandover& handover, UniqueFd fuse) {
    return Serve(TakeOver(handover, std::move(fuse)));
  }

 private:
  std::string StatusPath() const { return JoinPath(config_.runtime_dir(), "status"); }

  void Ready() {
    status_.set_pid(getpid());
    if (ready_fd_ >= 0) {
      WriteAll(ready_fd_, FrameReadyMessage(status_.SerializeAsString()));
      ReplaceWithDevNull(ready_fd_);
      ready_fd_ = -1;
    }
  }

  void OnStatus(const ServerStatus& s) {
    status_.set_state(ToProtoState(s.state));
    status_.set_message(s.message);
    status_.set_portal(s.portal);
    status_.set_reconnects(s.reconnects);
    status_.set_capacity_bytes(s.capacity_bytes);
    status_.set_capacity_refreshes(s.capacity_refreshes);
    status_.set_io_failing(s.io_failing);
    status_.set_pid(getpid());
    (void)WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600);
  }

  int Serve(absl::Status started) {
    if (!started.ok()) {
      status_.set_state(SessionStatus::FAILED);
      status_.set_message(std::string(started.message()));
      status_.set_error_code(static_cast<int>(started.code()));
      Ready();
      return 1;
    }
    absl::Status status = server_->Run(stop_fd_.Get(), refresh_fd_.Get());
    server_.reset();  // Unmounts FUSE, logs out.
    if (status.code() == absl::StatusCode::kAborted) {
      // The volume is dead for good: the last status says why, for the agent's health checks
      // (the process is gone), until the volume is unstaged.
      status_.set_state(SessionStatus::FUSE_ABORTED);
      status_.set_message(std::string(status.message()));
      (void)WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600);
      return kExitFuseAborted;
    }
    (void)RemoveFileIfExists(StatusPath());
    (void)RemoveFileIfExists(JoinPath(config_.runtime_dir(), "counters"));
    return status.ok() ? 0 : 1;
  }

  // Signals: SIGUSR1 (capacity refresh) always, SIGTERM/SIGINT (clean stop) from the caller's
  // point on.
  absl::Status ReadSignals(bool stop_too) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, stop_too ? SIGTERM : SIGUSR1);
    if (stop_too) {
      sigaddset(&set, SIGINT);
    }
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    UniqueFd& fd = stop_too ? stop_fd_ : refresh_fd_;
    fd.Reset(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    return fd ? absl::OkStatus() : ErrnoStatus(errno, "signalfd");
  }

  // Who this process is (and its keeper, if one restarts it), on disk before anything else.
  absl::Status Introduce(const std::string& message) {
    status_.set_state(SessionStatus::STARTING);
    status_.set_message(message);
    status_.set_pid(getpid());
    status_.set_start_time(ProcessStartTime(getpid()));
    status_.set_volume_id(config_.volume_id());
    // NOLINTNEXTLINE(concurrency-mt-unsafe): at start, before any thread.
    if (const char* keeper = getenv(kKeeperVariable); keeper != nullptr) {
      int pid = 0;
      if (absl::SimpleAtoi(keeper, &pid) && pid > 0) {
        status_.set_keeper_pid(pid);
        status_.set_keeper_start_time(ProcessStartTime(pid));
      }
    }
    return WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600);
  }

  // The options of the server, but for what only a login can tell.
  FuseLunServerOptions ServerOptions(const LoginParams& params, std::vector<Portal> portals) {
    FuseLunServerOptions options;
    options.portals = std::move(portals);
    options.login = params;
    options.mountpoint = JoinPath(config_.runtime_dir(), "mnt");
    options.counters = counters_.get();
    options.on_status = [this](const ServerStatus& s) { OnStatus(s); };
    if (const uint64_t usec = WatchdogIntervalUsec(); usec > 0) {
      options.on_alive = [] { (void)NotifyServiceManager("WATCHDOG=1"); };
    }
    options.replacement_timeout = std::chrono::seconds(
        config_.replacement_timeout_seconds() == 0 ? 120 : config_.replacement_timeout_seconds());
    return options;
  }

  LoginParams Login(std::vector<Portal>* portals) const {
    LoginParams params;
    params.iqn = config_.iqn();
    params.lun = config_.lun();
    params.initiator_name = config_.initiator_name();
    if (!config_.chap_user().empty()) {
      params.chap = ChapCredentials{config_.chap_user(), config_.chap_secret(),
                                    config_.chap_user_in(), config_.chap_secret_in()};
    }
    for (const auto& p : config_.portals()) {
      portals->push_back(FromProto(p));
    }
    if (!portals->empty()) {
      params.portal = portals->front();
    }
    return params;
  }

  // Leaves what a successor needs with the manager (systemd's file descriptor store, or the
  // keeper): the config and the LUN as checked, and the /dev/fuse descriptor. Without a manager
  // nothing is kept, and a process that dies takes the volume's I/O with it.
  void KeepForSuccessor(const LunIdentity& identity, const LunCapacity& capacity) {
    SessionHandover handover;
    *handover.mutable_config() = config_;
    ToProto(identity, handover.mutable_identity());
    handover.set_capacity_bytes(capacity.Bytes());
    handover.set_block_size(capacity.block_size);
    auto memory = SealedMemoryFile("stagehand-session-handover", handover.SerializeAsString());
    auto fuse = server_->DuplicateFuse();
    if (!memory.ok() || !fuse.ok()) {
      return;
    }
    const std::array<int, 1> handover_fd{memory->Get()};
    const std::array<int, 1> fuse_fd{fuse->Get()};
    (void)NotifyServiceManager("FDSTORE=1\nFDNAME=handover", handover_fd);
    (void)NotifyServiceManager("FDSTORE=1\nFDNAME=fuse", fuse_fd);
  }

  absl::Status TakeOver(const SessionHandover& handover, UniqueFd fuse) {
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/false));
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/true));
    SH_RETURN_IF_ERROR(
        Introduce("taking over the FUSE connection of a session process that ended"));
    status_.set_took_over(true);
    std::vector<Portal> portals;
    const LoginParams params = Login(&portals);
    SH_ASSIGN_OR_RETURN(counters_,
                        CountersFile::Create(JoinPath(config_.runtime_dir(), "counters")));
    FuseLunServerOptions options = ServerOptions(params, portals);
    options.identity = FromProto(handover.identity());
    options.capacity.block_size = handover.block_size();
    options.capacity.blocks =
        handover.block_size() == 0 ? 0 : handover.capacity_bytes() / handover.block_size();
    *status_.mutable_identity() = handover.identity();
    status_.set_capacity_bytes(handover.capacity_bytes());
    status_.set_block_size(handover.block_size());
    SH_ASSIGN_OR_RETURN(server_, FuseLunServer::Adopt(std::move(options), std::move(fuse)));
    status_.set_lun_file(server_->LunPath());
    Ready();
    return absl::OkStatus();
  }

  absl::Status Start() {
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/false));
    if (config_.portals().empty()) {
      return absl::InvalidArgumentError("session config has no portal");
    }
    // Who this process is, on disk before the login: a crash of the agent while the login
    // runs must leave a process that the next teardown can find and stop, not a second one
    // next to it on the same FUSE mount point.
    SH_RETURN_IF_ERROR(Introduce("logging in"));
    std::vector<Portal> portals;
    LoginParams params = Login(&portals);
    // First portal that answers wins; the others are failover targets.
    absl::Status last = absl::UnavailableError("no portal tried");
    std::unique_ptr<Connection> conn;
    for (const auto& portal : portals) {
      params.portal = portal;
      auto c = Connection::Login(params);
      if (c.ok()) {
        conn = std::move(*c);
        break;
      }
      last = c.status();
      // Authentication and naming errors are the same on every portal.
      if (last.code() != absl::StatusCode::kUnavailable) {
        break;
      }
    }
    if (!conn) {
      return last;
    }
    SH_ASSIGN_OR_RETURN(LunIdentity identity, conn->ReadIdentity());
    ToProto(identity, status_.mutable_identity());
    SH_RETURN_IF_ERROR(
        CheckExpectedIdentity(identity, config_.expected_wwn(), config_.expected_serial()));
    SH_ASSIGN_OR_RETURN(LunCapacity capacity, conn->ReadCapacity());
    status_.set_capacity_bytes(capacity.Bytes());
    status_.set_block_size(capacity.block_size);

    // SIGTERM ends the login above at once (nothing to undo yet); from here on it is a clean
    // stop that unmounts FUSE and logs out.
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/true));
    SH_ASSIGN_OR_RETURN(counters_,
                        CountersFile::Create(JoinPath(config_.runtime_dir(), "counters")));
    FuseLunServerOptions options = ServerOptions(params, portals);
    SH_RETURN_IF_ERROR(MakeDirs(options.mountpoint, 0700));
    options.identity = identity;
    options.capacity = capacity;
    SH_ASSIGN_OR_RETURN(server_, FuseLunServer::Create(std::move(options), std::move(conn)));
    KeepForSuccessor(identity, capacity);
    status_.set_lun_file(server_->LunPath());
    status_.set_portal(params.portal.ToString());
    status_.set_state(SessionStatus::UP);
    status_.set_message("serving");
    SH_RETURN_IF_ERROR(WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600));
    Ready();
    return absl::OkStatus();
  }

  SessionConfig config_;
  int ready_fd_;
  UniqueFd stop_fd_;
  UniqueFd refresh_fd_;
  SessionStatus status_;
  CountersFile counters_;  // Outlives server_ (declared first, destroyed last).
  std::unique_ptr<FuseLunServer> server_;
};

}  // namespace

std::string FrameReadyMessage(std::string_view serialized_status) {
  const auto n = static_cast<uint32_t>(serialized_status.size());
  std::string out;
  out.reserve(4 + serialized_status.size());
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  }
  out.append(serialized_status);
  return out;
}

std::optional<std::string> UnframeReadyMessage(std::string_view buffer) {
  if (buffer.size() < 4) {
    return std::nullopt;
  }
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) {
    n |= static_cast<uint32_t>(static_cast<unsigned char>(buffer[i])) << (8 * i);
  }
  if (buffer.size() - 4 < n) {
    return std::nullopt;
  }
  return std::string(buffer.substr(4, n));
}

int RunSessionProcess(int config_fd, int ready_fd) {
  // The agent that started us may go away; writing to its pipes must not kill us.
  signal(SIGPIPE, SIG_IGN);
  std::map<std::string, UniqueFd> passed = TakeListenFds();
  if (passed.contains("handover") && passed.contains("fuse")) {
    auto raw = ReadWholeFd(passed["handover"].Get());
    SessionHandover handover;
    if (raw.ok() && handover.ParseFromString(*raw)) {
      Session session(handover.config(), ready_fd);
      return session.RunTakeover(handover, std::move(passed["fuse"]));
    }
    // Unreadable: nothing to take over with. Exit without a restart; the volume shows the
    // session gone.
    return 1;
  }
  auto raw = ReadAll(config_fd);
  ReplaceWithDevNull(config_fd);
  SessionConfig config;
  if (!raw.ok() || !config.ParseFromString(*raw)) {
    SessionStatus failed;
    failed.set_state(SessionStatus::FAILED);
    failed.set_message("cannot read the session config");
    failed.set_error_code(static_cast<int>(absl::StatusCode::kInternal));
    WriteAll(ready_fd, FrameReadyMessage(failed.SerializeAsString()));
    close(ready_fd);
    return 1;
  }
  Session session(std::move(config), ready_fd);
  return session.Run();
}

int SessionMain(const std::vector<std::string>& args) {
  bool keeper = false;
  int watchdog_ms = 0;
  for (const std::string& arg : args) {
    if (arg == "--keeper") {
      keeper = true;
    } else if (arg.starts_with("--watchdog-ms=") &&
               absl::SimpleAtoi(arg.substr(std::strlen("--watchdog-ms=")), &watchdog_ms)) {
    }
  }
  if (!keeper) {
    return RunSessionProcess(STDIN_FILENO, STDOUT_FILENO);
  }
  // The keeper's own command line, as executed (a relocated bundle runs through its loader),
  // without --keeper, is the session's.
  KeeperOptions options;
  const auto cmdline = ReadFileToString("/proc/self/cmdline");
  for (absl::string_view word : absl::StrSplit(cmdline.value_or(""), '\0', absl::SkipEmpty())) {
    if (word != "--keeper") {
      options.argv.emplace_back(word);
    }
  }
  options.stdin_fd = STDIN_FILENO;
  options.stdout_fd = STDOUT_FILENO;
  options.watchdog = std::chrono::milliseconds(watchdog_ms);
  options.env[kKeeperVariable] = std::to_string(getpid());
  return RunServiceKeeper(options);
}

}  // namespace stagehand::iscsi
