// KernelTransport's reservations: a single-node volume's LUN claimed on every path before the
// attach returns (so before any fsck, mkfs or mount), renewed while it is staged, given up at
// detach (transport/kernel/reservation_renewer.h).

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/log.h"
#include "iscsi/reservation_claim.h"
#include "iscsi/state_conversions.h"
#include "transport/kernel/kernel_transport.h"

namespace stagehand::transport::kernel {
namespace {

constexpr LogComponent kComponent = LogComponent::kSessions;

// Where a volume's keys are kept: its private runtime directory.
std::string ReservationFile(const std::string& runtime_dir) {
  return absl::StrCat(runtime_dir, "/kernel-reservation");
}

}  // namespace

absl::Status KernelTransport::Reserve(const AttachRequest& request,
                                      const std::vector<std::string>& disks, Attachment& a) {
  state::v1::KernelSessionRecord& rec = *a.session.mutable_kernel();
  if (request.runtime_dir.empty()) {
    return absl::InvalidArgumentError("a reserved volume needs a runtime directory");
  }
  const std::string file = ReservationFile(request.runtime_dir);
  // A re-stage of a volume held here: the claim below takes the node's registrations over.
  (void)renewer_->Drop(file);
  uint64_t took_over_from = 0;
  auto claimed = ClaimPaths(options_.open_reservations, disks, request.reservation_key,
                            request.takeover_key, request.takeover_node_keys, &took_over_from);
  if (!claimed.ok() && absl::IsUnimplemented(claimed.status()) && request.reservation_optional) {
    Log(kComponent)
        .warn(
            "volume '{}': the target does not support SCSI-3 persistent reservations: served "
            "without one (takeoverAfter off), and another node could write to it too",
            request.volume_id);
    rec.set_unreserved(true);
    return absl::OkStatus();
  }
  if (!claimed.ok()) {
    return absl::IsUnimplemented(claimed.status()) ? iscsi::StageRefusal(claimed.status())
                                                   : claimed.status();
  }
  claimed->set_renew_seconds(request.reservation_renew_seconds);
  absl::Status held = MakeDirs(request.runtime_dir, 0700);
  if (held.ok()) {
    held = renewer_->Hold(file, *claimed);
  }
  if (!held.ok()) {
    if (auto released = ReleasePaths(options_.open_reservations, *claimed); !released.ok()) {
      Log(kComponent).warn("volume '{}': {}", request.volume_id, released);
    }
    return held;
  }
  rec.set_reservation_file(file);
  a.took_over_from = took_over_from;
  Log(kComponent)
      .info("volume '{}': LUN reserved for this node under key {} on {} path(s)", request.volume_id,
            iscsi::FormatKey(claimed->paths(0).key()), claimed->paths_size());
  return absl::OkStatus();
}

void KernelTransport::Unreserve(const state::v1::KernelSessionRecord& session) {
  const std::string& file = session.reservation_file();
  if (file.empty()) {
    return;
  }
  std::optional<state::v1::KernelReservation> reservation = renewer_->Drop(file);
  if (!reservation) {
    // Not held by this process (an agent that restarted before its resume): the file says.
    auto text = ReadFileToString(file);
    state::v1::KernelReservation read;
    if (text.ok() && read.ParseFromString(*text)) {
      reservation = std::move(read);
    }
  }
  if (reservation) {
    if (auto released = ReleasePaths(options_.open_reservations, *reservation); !released.ok()) {
      Log(kComponent)
          .warn(
              "cannot release the LUN's reservation ({}): other nodes cannot stage it until this "
              "node's key is taken over or released (stagehandctl iscsi reservation)",
              released);
    }
  }
  if (::unlink(file.c_str()) != 0 && errno != ENOENT) {
    Log(kComponent).warn("cannot remove {}: {}", file, ErrnoStatus(errno, "unlink"));
  }
}

absl::StatusOr<WriterChange> KernelTransport::SetWriter(const state::v1::SessionRecord& session,
                                                        const AttachRequest& request) {
  MutexLock lock(mu_);
  WriterChange change;
  change.session = session;
  state::v1::KernelSessionRecord& rec = *change.session.mutable_kernel();
  if (rec.reservation_file().empty() && !request.runtime_dir.empty() &&
      renewer_->Get(ReservationFile(request.runtime_dir))) {
    // Held since a claim whose record was not saved (the agent died in between).
    rec.set_reservation_file(ReservationFile(request.runtime_dir));
  }
  const bool holds = !rec.reservation_file().empty() || rec.unreserved();
  if ((request.reservation_key != 0) == holds) {
    return change;  // Already so.
  }
  std::vector<std::string> disks;
  for (const state::v1::KernelPath& path : rec.paths()) {
    const iscsi::Portal portal = iscsi::FromProto(path.portal());
    auto s = sysfs_.FindSession(path.iqn(), portal.host, portal.port);
    auto d = s ? sysfs_.SessionDisk(*s, path.lun()) : std::nullopt;
    if (!s || s->state != "LOGGED_IN" || !d || d->disk.empty()) {
      disks.clear();
      break;
    }
    disks.push_back(d->disk);
  }
  if (request.reservation_key == 0) {
    if (!disks.empty() && !rec.device().empty()) {
      // What the writer left in the device's page cache lands while this node still holds the
      // LUN: after the release the target would refuse it. (Not while a path is down: a map
      // that queues I/O without a path would hold the flush, and the release cannot be made
      // then either.)
      SH_RETURN_IF_ERROR(SyncPath(rec.device()));
    }
    Unreserve(rec);
    rec.clear_reservation_file();
    rec.set_unreserved(false);
    Log(kComponent).info("volume '{}': the LUN's reservation is given up", request.volume_id);
    return change;
  }
  if (disks.empty()) {
    return absl::UnavailableError(
        "a path of the volume's LUN is down; this node becomes the volume's writer once every "
        "path is back (each must be registered before a write)");
  }
  Attachment a;
  a.session = change.session;
  SH_RETURN_IF_ERROR(Reserve(request, disks, a));
  change.session = std::move(a.session);
  change.took_over_from = a.took_over_from;
  return change;
}

absl::Status KernelTransport::Resume(const state::v1::SessionRecord& session) {
  const std::string& file = session.kernel().reservation_file();
  return file.empty() ? absl::OkStatus() : renewer_->Resume(file);
}

SessionDescription KernelTransport::Describe(const state::v1::SessionRecord& session) {
  SessionDescription d;
  d.transport = kName;
  d.unreserved = session.kernel().unreserved();
  if (const std::string& file = session.kernel().reservation_file(); !file.empty()) {
    if (auto state = renewer_->Get(file); state && !state->fenced) {
      d.reservation_key = state->key;
    }
  }
  return d;
}

}  // namespace stagehand::transport::kernel
