#include "transport/userspace/session_worker.h"

#include <absl/strings/str_cat.h>

#include "base/process.h"
#include "session/protocol.h"

namespace stagehand::transport::userspace {

using Record = state::v1::UserspaceSessionRecord;
using state::v1::SessionStatus;

Worker CurrentWorker(const Record& session) {
  Worker w;
  if (auto status = session::ReadStatus(session.runtime_dir()); status.ok()) {
    w.status = std::move(*status);
  }
  if (w.status && w.status->pid() > 0 && w.status->start_time() != 0 &&
      IsSameProcessAlive(w.status->pid(), w.status->start_time())) {
    w.pid = w.status->pid();
    w.start_time = w.status->start_time();
  } else if (session.pid() > 0 && IsSameProcessAlive(session.pid(), session.start_time())) {
    w.pid = session.pid();
    w.start_time = session.start_time();
  }
  return w;
}

Record WithCurrentSupervisor(Record session, const std::optional<SessionStatus>& status) {
  if (status) {
    if (!status->unit().empty()) {
      session.set_unit(status->unit());
    }
    if (status->keeper_pid() > 0) {
      session.set_keeper_pid(status->keeper_pid());
      session.set_keeper_start_time(status->keeper_start_time());
    }
  }
  return session;
}

std::string StallKey(const Record& session, int pid) {
  return absl::StrCat(session.runtime_dir(), "@", pid);
}

}  // namespace stagehand::transport::userspace
