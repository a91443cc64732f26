#include "transport/userspace/userspace_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <optional>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/build_id.h"
#include "base/dir_watch.h"
#include "base/file_io.h"
#include "base/paths.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "iscsi/reservation_claim.h"
#include "iscsi/state_conversions.h"
#include "session/protocol.h"
#include "transport/userspace/loop_device.h"
#include "transport/userspace/session_worker.h"

namespace stagehand::transport::userspace {
namespace {

using state::v1::SessionConfig;
using state::v1::SessionRecord;
using Record = state::v1::UserspaceSessionRecord;
using state::v1::SessionStatus;

std::string SelfExe() {
  std::array<char, PATH_MAX> buf{};
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : "/proc/self/exe";
}

// Reads the session's framed first status from the ready pipe. Empty when the pipe closed first
// (the process died before reporting).
absl::StatusOr<std::string> ReadReadyMessage(int fd, std::chrono::milliseconds timeout) {
  std::string buffer;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto message = session::UnframeReadyMessage(buffer)) {
      return *message;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError("session process did not report readiness in time");
    }
    pollfd pfd{fd, POLLIN, 0};
    int n = poll(&pfd, 1, static_cast<int>(left.count()));
    if (n <= 0) {
      continue;  // EINTR or timeout: the deadline check above decides.
    }
    std::array<char, 4096> buf{};
    ssize_t r = read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      return std::string();
    }
    buffer.append(buf.data(), static_cast<size_t>(r));
  }
}

bool IsMountPoint(const std::string& path) {
  auto text = ReadFileToString("/proc/self/mountinfo");
  if (!text.ok()) {
    return false;
  }
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && fields[4] == path) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string UserspaceTransport::DefaultBinary() {
  // The lean session binary installed next to ours; else ourselves in the session role.
  const std::string self = SelfExe();
  const std::string lean = JoinPath(ParentDir(self), "stagehand-session");
  return access(lean.c_str(), X_OK) == 0 ? lean : self;
}

UserspaceTransport::UserspaceTransport(UserspaceTransportOptions options)
    : options_(std::move(options)), stalls_(options_.stall_timeout) {
  if (options_.binary.empty()) {
    options_.binary = DefaultBinary();
  }
  session_build_ = FileBuildId(options_.binary).value_or("");
  if (options_.command.empty()) {
    // `stagehand-session` ignores its arguments; `stagehand` needs "__session" to take the role.
    options_.command = {options_.binary, "__session"};
  }
  if (!options_.launcher) {
    options_.launcher = MakeDetachedLauncher();
  }
}

absl::Status UserspaceTransport::ProbeSessionCommand() const {
  std::vector<std::string> argv = options_.command;
  argv.emplace_back(session::kProbeArgument);
  RunOptions run;
  run.timeout = std::chrono::seconds(10);
  auto result = RunProcess(argv, run);
  const std::string shown = ArgvToString(options_.command);
  if (!result.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the session command '", shown, "' cannot run: ", result.status().message()));
  }
  if (result->exit_code == 0 &&
      result->output.starts_with(absl::StrCat(session::kProbeAnswer, " "))) {
    return absl::OkStatus();
  }
  std::string said = result->output.substr(0, result->output.find('\n'));
  if (said.size() > 200) {
    said.resize(200);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the session command '", shown, "' does not run as a stagehand session (exit status ",
      result->exit_code, said.empty() ? "" : ": ", said,
      "): new volumes cannot be staged and sessions that systemd restarts fail; reinstall "
      "stagehand-session (or fix --session-binary) and restart the agent"));
}

void UserspaceTransport::Prepare(const AttachRequest& request, state::v1::SessionRecord* record) {
  Record* session = record->mutable_userspace();
  session->set_runtime_dir(request.runtime_dir);
  session->set_fuse_mount(session::RuntimePath(request.runtime_dir, session::kMountDir));
}

absl::StatusOr<SessionStatus> UserspaceTransport::Launch(SessionConfig config,
                                                         const std::string& description,
                                                         Record* record) {
  SessionLaunch launch;
  launch.argv = options_.command;
  launch.unit_name = SessionUnitName(record->runtime_dir(), record->generation());
  launch.description = description;
  launch.watchdog = options_.session_watchdog;
  if (options_.launcher->Name() == "systemd") {
    record->set_unit(launch.unit_name);
    config.set_unit(launch.unit_name);
  }
  std::array<int, 2> ready{};
  if (pipe2(ready.data(), O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "pipe2");
  }
  UniqueFd ready_read(ready[0]), ready_write(ready[1]);
  // The config (with secrets) goes in a sealed memory file on the session's stdin, never in
  // argv or a file on disk. Writing it cannot block, however large the caller made it (a pipe
  // would, past its buffer, before the session reads).
  SH_ASSIGN_OR_RETURN(UniqueFd config_file,
                      SealedMemoryFile("stagehand-session-config", config.SerializeAsString()));
  launch.stdin_fd = config_file.Get();
  launch.stdout_fd = ready_write.Get();
  SH_RETURN_IF_ERROR(options_.launcher->Launch(launch));
  config_file.Reset();
  ready_write.Reset();

  SH_ASSIGN_OR_RETURN(std::string raw, ReadReadyMessage(ready_read.Get(), options_.start_timeout));
  SessionStatus status;
  if (raw.empty() || !status.ParseFromString(raw)) {
    return absl::InternalError(
        record->unit().empty()
            ? std::string("session process exited without reporting its state")
            : absl::StrCat("session process exited without reporting its state (see journalctl "
                           "-u ",
                           record->unit(), ")"));
  }
  return status;
}

absl::StatusOr<Attachment> UserspaceTransport::Attach(const AttachRequest& request) {
  const auto* target = std::get_if<iscsi::TargetSpec>(&request.target);
  if (target == nullptr) {
    return absl::InvalidArgumentError("the userspace transport speaks iSCSI only");
  }
  SH_RETURN_IF_ERROR(MakeDirs(request.runtime_dir, 0700));
  SessionConfig config;
  for (const auto& p : target->portals) {
    iscsi::ToProto(p, config.add_portals());
  }
  config.set_iqn(target->iqn);
  config.set_lun(target->lun);
  config.set_initiator_name(request.initiator_name);
  if (target->session_chap) {
    config.set_chap_user(target->session_chap->user);
    config.set_chap_secret(target->session_chap->secret);
    config.set_chap_user_in(target->session_chap->user_in);
    config.set_chap_secret_in(target->session_chap->secret_in);
  }
  config.set_runtime_dir(request.runtime_dir);
  config.set_volume_id(request.volume_id);
  config.set_replacement_timeout_seconds(request.replacement_timeout_seconds);
  config.set_fuse_io_uring(options_.fuse_io_uring);
  config.set_reservation_key(request.reservation_key);
  config.set_reservation_renew_seconds(request.reservation_renew_seconds);
  config.set_takeover_key(request.takeover_key);
  config.set_takeover_node_keys(request.takeover_node_keys);
  config.set_reservation_optional(request.reservation_optional);
  config.set_expected_wwn(target->expected_wwn);
  config.set_expected_serial(target->expected_serial);

  SessionRecord attached;
  Record& record = *attached.mutable_userspace();
  record.set_runtime_dir(request.runtime_dir);
  record.set_fuse_mount(session::RuntimePath(request.runtime_dir, session::kMountDir));
  // From here on, any failure tears down what was started.
  absl::Cleanup undo = [&] { (void)Detach(attached); };
  SH_ASSIGN_OR_RETURN(
      SessionStatus status,
      Launch(config, absl::StrCat("stagehand iSCSI session ", target->iqn, " lun ", target->lun),
             &record));
  record.set_pid(status.pid());
  record.set_start_time(status.start_time() != 0 ? status.start_time()
                                                 : ProcessStartTime(status.pid()));
  record.set_keeper_pid(status.keeper_pid());
  record.set_keeper_start_time(status.keeper_start_time());
  if (status.state() != SessionStatus::UP) {
    const auto code = static_cast<absl::StatusCode>(status.error_code());
    absl::Status failed(code == absl::StatusCode::kOk ? absl::StatusCode::kInternal : code,
                        status.message());
    iscsi::SetHolderKey(failed, status.holder_key());
    iscsi::SetHolderNodeKeys(failed, status.holder_node_keys());
    return failed;
  }
  if (request.vet_identity) {
    SH_RETURN_IF_ERROR(request.vet_identity(iscsi::FromProto(status.identity()), attached));
  }
  record.set_lun_file(status.lun_file());
  SH_ASSIGN_OR_RETURN(std::string device,
                      AttachLoopDevice(status.lun_file(), status.block_size(), request.read_only));
  record.set_loop_device(device);

  Attachment a;
  a.device = device;
  a.identity = iscsi::FromProto(status.identity());
  a.capacity.block_size = status.block_size();
  a.capacity.blocks = status.block_size() == 0 ? 0 : status.capacity_bytes() / status.block_size();
  a.session = attached;
  a.took_over_from = status.took_over_from();
  std::move(undo).Cancel();
  return a;
}

absl::Status UserspaceTransport::Detach(const SessionRecord& record) {
  const Record& recorded = record.userspace();
  const Worker worker = CurrentWorker(recorded);
  Record session = WithCurrentSupervisor(recorded, worker.status);
  stalls_.Forget(StallKey(session, worker.pid));
  // A crash between starting the session and persisting its record leaves only the runtime
  // directory: its status file names the process (and its keeper) and the LUN file.
  if (session.pid() == 0 && worker.status && worker.status->pid() > 0) {
    const SessionStatus& status = *worker.status;
    session.set_pid(status.pid());
    // The start time it wrote itself; older sessions did not: take the live one's.
    session.set_start_time(status.start_time() != 0 ? status.start_time()
                                                    : ProcessStartTime(status.pid()));
    session.set_lun_file(status.lun_file());
    session.set_keeper_pid(status.keeper_pid());
    session.set_keeper_start_time(status.keeper_start_time());
  }
  if (session.loop_device().empty() && !session.lun_file().empty()) {
    auto found = FindLoopDevice(session.lun_file());
    if (found.ok() && found->has_value()) {
      session.set_loop_device(**found);
    }
  }
  if (!session.loop_device().empty()) {
    SH_RETURN_IF_ERROR(DetachLoopDevice(session.loop_device(), session.lun_file()));
  }
  // For good: first whoever would start the process again (its unit, its keeper), then the
  // process. A supervisor that cannot be told matters only while no process runs (it may be
  // about to start one over a mount that is going away); a running one stops on SIGTERM with a
  // status of its own, which nobody restarts.
  absl::Status told = options_.launcher->StopSupervisor(session);
  if (!told.ok() && worker.pid == 0) {
    return told;
  }
  KillAndWait(session.keeper_pid(), session.keeper_start_time(), options_.stop_timeout);
  KillAndWait(worker.pid, worker.start_time, options_.stop_timeout);
  if (!session.fuse_mount().empty() && IsMountPoint(session.fuse_mount())) {
    // The session process died without unmounting: the FUSE mount is dead. Detach it.
    if (umount2(session.fuse_mount().c_str(), MNT_DETACH) != 0 && errno != EINVAL &&
        errno != ENOENT) {
      return ErrnoStatus(errno,
                         absl::StrCat("unmount dead FUSE mount '", session.fuse_mount(), "'"));
    }
  }
  if (!session.runtime_dir().empty()) {
    // Everything the session protocol puts there (a session killed for good leaves its
    // handover socket), then the directory.
    for (const char* name : {session::kStatusFile, session::kStatusTempFile, session::kCountersFile,
                             session::kHandoverSocket}) {
      (void)RemoveFileIfExists(session::RuntimePath(session.runtime_dir(), name));
    }
    if (!session.fuse_mount().empty()) {
      rmdir(session.fuse_mount().c_str());
    }
    rmdir(session.runtime_dir().c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> UserspaceTransport::RefreshCapacity(const SessionRecord& record) {
  const Record& session = record.userspace();
  const Worker worker = CurrentWorker(session);
  if (worker.pid == 0) {
    return absl::UnavailableError(
        absl::StrCat("no iSCSI session process runs for '", session.runtime_dir(), "'"));
  }
  SH_ASSIGN_OR_RETURN(SessionStatus before, session::ReadStatus(session.runtime_dir()));
  // The session writes its status file (rename into place) when the refresh completes.
  SH_ASSIGN_OR_RETURN(DirWatch watch, DirWatch::Create());
  SH_RETURN_IF_ERROR(watch.Add(session.runtime_dir(), IN_MOVED_TO).status());
  if (kill(worker.pid, SIGUSR1) != 0) {
    return ErrnoStatus(errno, "signal the session process");
  }
  absl::StatusOr<SessionStatus> now = before;
  const bool refreshed =
      WaitUntil(watch, std::chrono::steady_clock::now() + options_.stop_timeout, [&] {
        now = session::ReadStatus(session.runtime_dir());
        return now.ok() && now->capacity_refreshes() > before.capacity_refreshes();
      });
  if (!refreshed) {
    return absl::DeadlineExceededError("the session did not re-read the LUN capacity in time");
  }
  if (!session.loop_device().empty()) {
    SH_RETURN_IF_ERROR(RefreshLoopCapacity(session.loop_device()));
  }
  return now->capacity_bytes();
}

absl::StatusOr<std::optional<SessionRecord>> UserspaceTransport::Upgrade(
    const SessionRecord& record) {
  Record session = record.userspace();
  const Worker worker = CurrentWorker(session);
  if (worker.pid == 0 || !worker.status || session_build_.empty() ||
      worker.status->build() == session_build_) {
    return std::nullopt;  // Nothing to replace.
  }
  if (worker.status->state() != SessionStatus::UP) {
    return absl::UnavailableError(absl::StrCat(
        "session process ", worker.pid, " is not serving now (",
        SessionStatus::State_Name(worker.status->state()), "); it is replaced once it serves"));
  }
  if (worker.status->fuse_mode() == "io_uring") {
    return absl::FailedPreconditionError(absl::StrCat(
        "session process ", worker.pid,
        " takes FUSE requests over io_uring, which cannot be handed over (what its ring holds "
        "would be lost); it serves on until the volume is unstaged"));
  }
  if (worker.status->handover_socket().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session process ", worker.pid,
        " is of a build that cannot hand its volume over; it serves on until the volume is "
        "unstaged"));
  }
  SessionConfig config;
  config.set_take_over(true);
  config.set_runtime_dir(session.runtime_dir());
  config.set_volume_id(worker.status->volume_id());
  SH_RETURN_IF_ERROR(
      Replace(session, worker, config,
              absl::StrCat("stagehand iSCSI session (upgrade) ", worker.status->volume_id()))
          .status());
  SessionRecord upgraded;
  *upgraded.mutable_userspace() = std::move(session);
  return upgraded;
}

absl::StatusOr<SessionStatus> UserspaceTransport::Replace(Record& session, const Worker& worker,
                                                          const SessionConfig& config,
                                                          const std::string& description) {
  Record next = session;
  uint32_t generation = session.generation() + 1;
  // A record saved before its successor's was (the agent died in between) is behind the unit
  // that serves now: never start a unit of that name again.
  while (worker.status && !worker.status->unit().empty() &&
         SessionUnitName(session.runtime_dir(), generation) == worker.status->unit()) {
    ++generation;
  }
  next.set_generation(generation);
  next.clear_unit();
  next.clear_keeper_pid();
  next.clear_keeper_start_time();
  auto status = Launch(config, description, &next);
  if (!status.ok() || status->state() != SessionStatus::UP) {
    // The old process serves on; the new one (if it runs) goes.
    if (status.ok()) {
      next.set_keeper_pid(status->keeper_pid());
      next.set_keeper_start_time(status->keeper_start_time());
    }
    (void)options_.launcher->StopSupervisor(next);
    KillAndWait(next.keeper_pid(), next.keeper_start_time(), options_.stop_timeout);
    if (status.ok()) {
      KillAndWait(status->pid(), status->start_time(), options_.stop_timeout);
    }
    if (!status.ok()) {
      return status.status();
    }
    const auto code = static_cast<absl::StatusCode>(status->error_code());
    absl::Status failed(code == absl::StatusCode::kOk ? absl::StatusCode::kInternal : code,
                        status->message());
    iscsi::SetHolderKey(failed, status->holder_key());
    iscsi::SetHolderNodeKeys(failed, status->holder_node_keys());
    return failed;
  }
  next.set_pid(status->pid());
  next.set_start_time(status->start_time());
  next.set_keeper_pid(status->keeper_pid());
  next.set_keeper_start_time(status->keeper_start_time());
  // The old process has let go and ends by itself; wait for it so that nothing of it is left
  // when this returns.
  (void)WaitForExit(worker.pid, options_.stop_timeout);
  session = std::move(next);
  return *status;
}

absl::StatusOr<WriterChange> UserspaceTransport::SetWriter(const SessionRecord& record,
                                                           const AttachRequest& request) {
  const Worker worker = CurrentWorker(record.userspace());
  Record session = WithCurrentSupervisor(record.userspace(), worker.status);
  const bool claim = request.reservation_key != 0;
  WriterChange change;
  change.session = record;
  if (!claim &&
      (worker.pid == 0 || !worker.status || worker.status->state() != SessionStatus::UP)) {
    // Nothing to give up now (not running, fenced), or nothing that can (reconnecting): an
    // unpublish never waits for it; the unstage gives up what is left.
    return change;
  }
  if (worker.pid == 0 || !worker.status || worker.status->state() != SessionStatus::UP) {
    return absl::UnavailableError(absl::StrCat(
        "the volume's session process is not serving now (",
        worker.status ? SessionStatus::State_Name(worker.status->state()) : "not running",
        "); publish again once it serves"));
  }
  const bool holds = worker.status->reservation_key() != 0 || worker.status->unreserved();
  if (claim == holds) {
    return change;  // Already so.
  }
  if (worker.status->fuse_mode() == "io_uring" || worker.status->handover_socket().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session process ", worker.pid,
        worker.status->fuse_mode() == "io_uring"
            ? " takes FUSE requests over io_uring"
            : " is of a build that cannot hand its volume over",
        ", so it cannot change the volume's writer: a multi-node single-writer volume is "
        "written only through a session that can (unstage it and stage it again)"));
  }
  if (!claim && !session.loop_device().empty()) {
    // What the writer left in the device's page cache lands while this node still holds the
    // LUN: after the release the target would refuse it.
    SH_RETURN_IF_ERROR(SyncPath(session.loop_device()));
  }
  SessionConfig config;
  config.set_take_over(true);
  config.set_runtime_dir(session.runtime_dir());
  config.set_volume_id(worker.status->volume_id());
  config.set_writer_change(claim ? SessionConfig::WRITER_CLAIM : SessionConfig::WRITER_RELEASE);
  config.set_reservation_key(request.reservation_key);
  config.set_reservation_renew_seconds(request.reservation_renew_seconds);
  config.set_takeover_key(request.takeover_key);
  config.set_takeover_node_keys(request.takeover_node_keys);
  config.set_reservation_optional(request.reservation_optional);
  SH_ASSIGN_OR_RETURN(SessionStatus started,
                      Replace(session, worker, config,
                              absl::StrCat("stagehand iSCSI session (", claim ? "writer" : "reader",
                                           ") ", worker.status->volume_id())));
  *change.session.mutable_userspace() = std::move(session);
  change.took_over_from = started.took_over_from();
  return change;
}

std::vector<SessionSample> UserspaceTransport::Sessions() {
  std::vector<SessionSample> samples;
  DIR* d = options_.sessions_dir.empty() ? nullptr : opendir(options_.sessions_dir.c_str());
  if (d == nullptr) {
    return samples;
  }
  absl::Cleanup close_dir = [d] { closedir(d); };
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') {
      continue;
    }
    const std::string dir = JoinPath(options_.sessions_dir, e->d_name);
    auto status = session::ReadStatus(dir);
    if (!status.ok()) {
      continue;
    }
    SessionSample sample;
    sample.transport = kName;
    sample.volume_id = status->volume_id().empty() ? e->d_name : status->volume_id();
    sample.state = SessionStatus::State_Name(status->state());
    sample.reconnects = status->reconnects();
    sample.process_started = StartTimeAsUnixSeconds(status->start_time());
    if (auto c = session::ReadCounters(session::RuntimePath(dir, session::kCountersFile)); c.ok()) {
      sample.counters = SessionSample::Counters{c->read_ops,    c->read_bytes, c->write_ops,
                                                c->write_bytes, c->flush_ops,  c->io_errors};
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace stagehand::transport::userspace
