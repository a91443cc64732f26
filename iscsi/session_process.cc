#include "iscsi/session_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/process.h"
#include "base/unique_fd.h"
#include "iscsi/fuse_lun_server.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/session_conversions.h"
#include "proto/state.pb.h"

namespace stagehand::iscsi {
namespace {

using state::v1::SessionConfig;
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

  int Run() {
    auto status = Start();
    if (!status.ok()) {
      status_.set_state(SessionStatus::FAILED);
      status_.set_message(std::string(status.message()));
      status_.set_error_code(static_cast<int>(status.code()));
      Ready();
      return 1;
    }
    status = server_->Run(stop_fd_.Get(), refresh_fd_.Get());
    server_.reset();  // Unmounts FUSE, logs out.
    if (status.code() == absl::StatusCode::kAborted) {
      // The volume is dead for good: the last status says why, for the agent's health checks
      // (the process is gone), until the volume is unstaged.
      status_.set_state(SessionStatus::FUSE_ABORTED);
      status_.set_message(std::string(status.message()));
      (void)WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600);
      return 1;
    }
    (void)RemoveFileIfExists(StatusPath());
    (void)RemoveFileIfExists(JoinPath(config_.runtime_dir(), "counters"));
    return status.ok() ? 0 : 1;
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

  absl::Status Start() {
    sigset_t refresh;
    sigemptyset(&refresh);
    sigaddset(&refresh, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &refresh, nullptr);
    refresh_fd_.Reset(signalfd(-1, &refresh, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!refresh_fd_) {
      return ErrnoStatus(errno, "signalfd");
    }
    if (config_.portals().empty()) {
      return absl::InvalidArgumentError("session config has no portal");
    }
    // Who this process is, on disk before the login: a crash of the agent while the login
    // runs must leave a process that the next teardown can find and stop, not a second one
    // next to it on the same FUSE mount point.
    status_.set_state(SessionStatus::STARTING);
    status_.set_message("logging in");
    status_.set_pid(getpid());
    status_.set_start_time(ProcessStartTime(getpid()));
    status_.set_volume_id(config_.volume_id());
    SH_RETURN_IF_ERROR(WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600));
    LoginParams params;
    params.iqn = config_.iqn();
    params.lun = config_.lun();
    params.initiator_name = config_.initiator_name();
    if (!config_.chap_user().empty()) {
      params.chap = ChapCredentials{config_.chap_user(), config_.chap_secret(),
                                    config_.chap_user_in(), config_.chap_secret_in()};
    }
    std::vector<Portal> portals;
    for (const auto& p : config_.portals()) {
      portals.push_back(FromProto(p));
    }
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

    status_.set_volume_id(config_.volume_id());
    // SIGTERM ends the login above at once (nothing to undo yet); from here on it is a clean
    // stop that unmounts FUSE and logs out.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    stop_fd_.Reset(signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!stop_fd_) {
      return ErrnoStatus(errno, "signalfd");
    }
    SH_ASSIGN_OR_RETURN(counters_,
                        CountersFile::Create(JoinPath(config_.runtime_dir(), "counters")));
    const std::string mountpoint = JoinPath(config_.runtime_dir(), "mnt");
    SH_RETURN_IF_ERROR(MakeDirs(mountpoint, 0700));
    FuseLunServerOptions options;
    options.portals = portals;
    options.login = params;
    options.identity = identity;
    options.capacity = capacity;
    options.mountpoint = mountpoint;
    options.counters = counters_.get();
    options.on_status = [this](const ServerStatus& s) { OnStatus(s); };
    options.replacement_timeout = std::chrono::seconds(
        config_.replacement_timeout_seconds() == 0 ? 120 : config_.replacement_timeout_seconds());
    SH_ASSIGN_OR_RETURN(server_, FuseLunServer::Create(std::move(options), std::move(conn)));
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

}  // namespace stagehand::iscsi
