#include "transport/session_record.h"

#include <utility>

namespace stagehand::transport {

using state::v1::SessionRecord;

std::string TransportOf(const SessionRecord& session) {
  if (session.kind_case() == SessionRecord::KIND_NOT_SET) {
    return "";
  }
  return SessionRecord::descriptor()->FindFieldByNumber(session.kind_case())->name();
}

const std::string& DeviceOf(const SessionRecord& session) {
  switch (session.kind_case()) {
    case SessionRecord::kUserspace:
      return session.userspace().loop_device();
    case SessionRecord::kKernel:
      return session.kernel().device();
    default:
      return session.device();  // Empty: what a record without a kind carries.
  }
}

SessionRecord UpgradeSessionRecord(SessionRecord session) {
  if (session.kind_case() != SessionRecord::KIND_NOT_SET) {
    return session;
  }
  SessionRecord out;
  if (session.transport() == "kernel") {
    auto* k = out.mutable_kernel();
    *k->mutable_paths() = std::move(*session.mutable_paths());
    k->set_multipath_map(session.multipath_map());
    k->set_device(session.device());
    if (session.has_identity()) {
      *k->mutable_identity() = session.identity();
    }
    return out;
  }
  const bool any = session.pid() != 0 || !session.runtime_dir().empty() ||
                   !session.fuse_mount().empty() || !session.lun_file().empty() ||
                   !session.loop_device().empty() || !session.unit().empty() ||
                   session.keeper_pid() != 0;
  if (!any) {
    return out;  // Nothing was attached: an empty record.
  }
  auto* u = out.mutable_userspace();
  u->set_pid(session.pid());
  u->set_start_time(session.start_time());
  u->set_runtime_dir(session.runtime_dir());
  u->set_fuse_mount(session.fuse_mount());
  u->set_lun_file(session.lun_file());
  u->set_loop_device(session.loop_device());
  u->set_unit(session.unit());
  u->set_keeper_pid(session.keeper_pid());
  u->set_keeper_start_time(session.keeper_start_time());
  u->set_generation(session.generation());
  return out;
}

}  // namespace stagehand::transport
