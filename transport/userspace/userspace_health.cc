// The userspace transport's view of a session's health and what serves it: from the session's
// status and counters files, the loop device's sysfs attributes and /proc, never from its FUSE
// mount (which hangs with the session).

#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"
#include "base/process.h"
#include "session/protocol.h"
#include "transport/userspace/loop_device.h"
#include "transport/userspace/session_worker.h"
#include "transport/userspace/userspace_transport.h"

namespace stagehand::transport::userspace {

using state::v1::SessionRecord;
using state::v1::SessionStatus;
using Record = state::v1::UserspaceSessionRecord;

namespace {

// The volume's health from what its session process last wrote.
SessionHealth FromStatus(const SessionStatus& status) {
  SessionHealth h;
  switch (status.state()) {
    case SessionStatus::UP:
      if (status.lost_ring_requests() > 0) {
        h.message = absl::StrCat(
            status.lost_ring_requests(),
            " FUSE request(s) were held in the io_uring ring of a session process that died; the "
            "kernel does not resend them, so the I/O waiting for them (a writer, the "
            "filesystem's journal) waits until the FUSE connection is aborted");
        h.reason = health::Reason::kFuseRequestsLost;
      }
      break;
    case SessionStatus::IDENTITY_MISMATCH:
      h.message = absl::StrCat("LUN identity changed after reconnect: ", status.message());
      h.reason = health::Reason::kLunIdentityChanged;
      break;
    case SessionStatus::CAPACITY_SHRUNK:
      h.message =
          absl::StrCat("LUN capacity is smaller than staged, I/O fails closed: ", status.message());
      h.reason = health::Reason::kLunCapacityShrunk;
      break;
    case SessionStatus::FENCED:
      h.message = absl::StrCat("fenced: ", status.message());
      h.reason = health::Reason::kFenced;
      break;
    case SessionStatus::FUSE_ABORTED:  // Written just before it exits.
      h.message = status.message();
      h.reason = health::Reason::kFuseConnectionAborted;
      break;
    default:
      h.message = absl::StrCat("iSCSI session is down: ", status.message());
      h.reason = status.state() != SessionStatus::RECONNECTING ? health::Reason::kSessionDown
                 : status.io_failing() ? health::Reason::kReplacementTimeoutPassed
                                       : health::Reason::kSessionReconnecting;
      break;
  }
  return h;
}

// How to abort the FUSE connection mounted at `mountpoint`: its fusectl file, named after the
// mount's device number, which /proc/self/mountinfo gives without touching the mount.
std::string HowToAbort(const std::string& mountpoint) {
  std::string control = "/sys/fs/fuse/connections/<N>/abort (N: the FUSE mount's minor number)";
  auto mountinfo = ReadFileToString("/proc/self/mountinfo");
  for (absl::string_view line : absl::StrSplit(mountinfo.ok() ? *mountinfo : "", '\n')) {
    // "<id> <parent> <major>:<minor> <root> <mount point> ...".
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() > 4 && f[4] == mountpoint && absl::StartsWith(f[2], "0:")) {
      control = absl::StrCat("/sys/fs/fuse/connections/", f[2].substr(2), "/abort");
    }
  }
  return absl::StrCat("abort it (echo 1 > ", control,
                      "), then unpublish and unstage the volume (restart the pods)");
}

// Whether the loop device still serves the session's LUN file; changes a healthy `h`.
void CheckLoop(const Record& session, SessionHealth& h) {
  if (!h.Usable() || session.loop_device().empty()) {
    return;
  }
  switch (CheckLoopAttachment(session.loop_device(), session.lun_file())) {
    case LoopAttachment::kAttached:
      break;
    case LoopAttachment::kDetaching:
      h.message = absl::StrCat(
          "loop device ", session.loop_device(),
          " was detached behind stagehand's back (losetup -d) while in use: it works until "
          "its last user closes it, then the volume has no device; unpublish and unstage the "
          "volume, then stage it again");
      h.reason = health::Reason::kLoopDeviceDetaching;
      break;
    case LoopAttachment::kGone:
      h.message = absl::StrCat("loop device ", session.loop_device(),
                               " no longer serves the session's LUN file (detached behind "
                               "stagehand's back?): I/O to the volume fails; unpublish and "
                               "unstage the volume, then stage it again");
      h.reason = health::Reason::kLoopDeviceGone;
      break;
  }
}

}  // namespace

SessionHealth UserspaceTransport::Health(const SessionRecord& record) {
  const Record& session = record.userspace();
  const Worker worker = CurrentWorker(session);
  if (worker.pid == 0) {
    // Name the process that died: the last one to write the status file (a successor of the
    // one the record names, when a keeper restarted it).
    const int last =
        worker.status && worker.status->pid() > 0 ? worker.status->pid() : session.pid();
    return Ended(session, worker.status, last);
  }
  const int pid = worker.pid;
  // A stopped session answers nothing: I/O to the volume waits (in D state) until it continues,
  // and its status file still says UP. Never look at its FUSE mount here: that would wait too.
  SessionHealth h;
  if (const char state = ProcessState(pid); state == 'T' || state == 't') {
    h.message = absl::StrCat("iSCSI session process ", pid, " is stopped (",
                             state == 'T' ? "by a signal" : "by a tracer",
                             "): I/O to the volume waits until it continues (kill -CONT ", pid, ")",
                             options_.session_watchdog.count() > 0
                                 ? absl::StrCat(" or its watchdog replaces it (",
                                                options_.session_watchdog.count(), " s)")
                                 : "");
    h.reason = health::Reason::kSessionStopped;
    return h;
  }
  if (!worker.status) {
    h.message = "iSCSI session status is unreadable";
    h.reason = health::Reason::kSessionDown;
    return h;
  }
  h = FromStatus(*worker.status);
  if (h.reason == health::Reason::kFuseRequestsLost) {
    absl::StrAppend(&h.message, ": ", HowToAbort(session.fuse_mount()));
  }
  CheckLoop(session, h);
  CheckAnswering(session, pid, h);
  CheckSupervised(*worker.status, pid, h);
  if (!h.reason && worker.status->unreserved()) {  // The least of its problems: it was allowed.
    h.message =
        "the target does not support SCSI-3 persistent reservations: this single-node volume is "
        "served without one (takeoverAfter \"off\"), and nothing keeps another node from "
        "writing to it";
    h.reason = health::Reason::kUnreserved;
  }
  return h;
}

void UserspaceTransport::CheckSupervised(const SessionStatus& status, int pid, SessionHealth& h) {
  if (h.reason) {
    return;  // Another problem says more.
  }
  // A keeper-managed session (the detached launcher) whose keeper is gone: it says why when it
  // could not start another; for a moment after a keeper's death it has not noticed yet.
  std::string why = status.unsupervised();
  if (why.empty() && status.keeper_pid() > 0 &&
      !IsSameProcessAlive(static_cast<int>(status.keeper_pid()), status.keeper_start_time())) {
    why = absl::StrCat("its keeper (pid ", status.keeper_pid(), ") is gone");
  }
  if (why.empty()) {
    return;
  }
  h.message = absl::StrCat("iSCSI session process ", pid, " serves, but ", why,
                           ": if it dies too, the volume's I/O fails until it is unpublished "
                           "and unstaged");
  h.reason = health::Reason::kSessionUnsupervised;
}

SessionHealth UserspaceTransport::Ended(const Record& session,
                                        const std::optional<SessionStatus>& last, int pid) {
  SessionHealth h;
  // Its last words, if it left any (a status file in the runtime directory, never on FUSE).
  if (last && last->state() == SessionStatus::FUSE_ABORTED) {
    h.message = last->message();
    h.reason = health::Reason::kFuseConnectionAborted;
  } else if (options_.launcher->Supervised(WithCurrentSupervisor(session, last))) {
    h.message = absl::StrCat("iSCSI session process ", pid,
                             " ended; its successor is being started and takes over the "
                             "volume's I/O (which waits meanwhile)");
    h.reason = health::Reason::kSessionRestarting;
  } else {
    h.message = absl::StrCat("iSCSI session process ", pid, " is not running");
    h.reason = health::Reason::kSessionGone;
  }
  return h;
}

void UserspaceTransport::CheckAnswering(const Record& session, int pid, SessionHealth& h) {
  if (!h.Usable()) {
    return;
  }
  // The counters file sits beside the FUSE mount, never under it: reading it cannot hang.
  const auto counters =
      session::ReadCounters(session::RuntimePath(session.runtime_dir(), session::kCountersFile));
  const auto since =
      counters.ok() ? session::SinceLastBeat(*counters, session::MonotonicNowNs()) : std::nullopt;
  if (since && *since >= options_.heartbeat_timeout) {
    h.message = absl::StrCat("iSCSI session process ", pid,
                             " runs but its loop has not turned for ", since->count() / 1000,
                             " s (deadlocked, frozen or stuck in memory reclaim?); I/O to the "
                             "volume waits until it answers: check the process (its stack in "
                             "/proc/",
                             pid, "/task/*/stack)");
    h.reason = health::Reason::kSessionNotAnswering;
    return;
  }
  if (session.loop_device().empty()) {
    return;
  }
  const auto activity = ReadLoopActivity(session.loop_device());
  const auto waited = activity ? stalls_.Observe(StallKey(session, pid), *activity) : std::nullopt;
  if (waited) {
    h.message = absl::StrCat("iSCSI session process ", pid, " runs but has completed none of the ",
                             activity->in_flight, " I/O request(s) waiting on ",
                             session.loop_device(), " for ", waited->count() / 1000,
                             " s (deadlocked or frozen?); I/O to the volume waits until it "
                             "answers: check the process (its stack in /proc/",
                             pid, "/task/*/stack)");
    h.reason = health::Reason::kSessionNotAnswering;
  }
}

SessionDescription UserspaceTransport::Describe(const SessionRecord& record) {
  const Record& session = record.userspace();
  const Worker worker = CurrentWorker(session);
  SessionDescription d;
  d.transport = kName;
  d.pid = worker.pid;
  if (worker.status) {
    d.build = worker.status->build();
    d.fuse_mode = worker.status->fuse_mode().empty() ? "classic" : worker.status->fuse_mode();
    d.io_flusher = worker.status->io_flusher();
    d.reservation_key = worker.status->reservation_key();
    d.unreserved = worker.status->unreserved();
  }
  d.outdated = worker.pid != 0 && !session_build_.empty() && d.build != session_build_;
  return d;
}

}  // namespace stagehand::transport::userspace
