// KernelTransport's detach side: taking paths out of dm-multipath maps, deleting SCSI devices,
// logging out only when no other volume uses the session.

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "base/log.h"
#include "iscsi/state_conversions.h"
#include "transport/kernel/kernel_transport.h"

namespace stagehand::transport::kernel {
namespace {

constexpr LogComponent kComponent = LogComponent::kSessions;

// The portal of a recorded path as an address: a record written by Prepare holds the name as
// given (kept as it is when it does not resolve now).
iscsi::Portal PathPortal(const state::v1::KernelPath& path) {
  iscsi::Portal portal = iscsi::FromProto(path.portal());
  if (auto resolved = ResolvePortal(portal); resolved.ok()) {
    portal = *resolved;
  }
  return portal;
}

}  // namespace

absl::Status KernelTransport::Detach(const state::v1::SessionRecord& session) {
  MutexLock lock(mu_);
  SH_ASSIGN_OR_RETURN(std::unique_ptr<DeviceWatch> watch, options_.watch());
  if (!session.kernel().reservation_file().empty() && !session.kernel().device().empty()) {
    // The reservation goes last of what the volume holds, but before its disks: never while
    // something (the staging mount) may still write. (Other errors, such as a flush that fails
    // on a fenced LUN, are the disks' removal's to report.)
    if (absl::Status idle = options_.release(session.kernel().device());
        absl::IsFailedPrecondition(idle)) {
      return idle;
    }
  }
  Unreserve(session.kernel());
  return DetachLocked(session.kernel(), *watch);
}

bool KernelTransport::MapIsOurs(const KernelSysfs::DmMap& map,
                                const state::v1::KernelSessionRecord& session) {
  std::vector<std::string> ours;
  for (const state::v1::KernelPath& path : session.paths()) {
    const iscsi::Portal portal = PathPortal(path);
    if (auto s = sysfs_.FindSession(path.iqn(), portal.host, portal.port)) {
      if (auto d = sysfs_.SessionDisk(*s, path.lun()); d && !d->disk.empty()) {
        ours.push_back(d->disk);
      }
    }
  }
  return std::all_of(map.slaves.begin(), map.slaves.end(), [&](const std::string& slave) {
    return std::find(ours.begin(), ours.end(), slave) != ours.end();
  });
}

absl::Status KernelTransport::RemovePathFromMap(const KernelSysfs::DmMap& map,
                                                const std::string& disk, DeviceWatch& watch) {
  std::string last;
  auto gone = watch.WaitFor(
      [&]() -> std::optional<std::string> {
        auto holder = sysfs_.MapHolding(disk);
        if (!holder) {
          return disk;
        }
        auto r = Run({"multipathd", "del", "path", disk}, kToolTimeout);
        last = r.ok() ? r->output : std::string(r.status().message());
        return sysfs_.MapHolding(disk) ? std::nullopt : std::optional<std::string>(disk);
      },
      options_.map_timeout, absl::StrCat(disk, " to leave dm-multipath map ", map.name));
  if (!gone.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot take ", disk, " out of dm-multipath map ", map.name,
                     " (another volume's: it has other paths): ", last));
  }
  Log(kComponent).info("took {} out of dm-multipath map {} (another volume's)", disk, map.name);
  return absl::OkStatus();
}

absl::Status KernelTransport::RemoveMap(const std::string& name, DeviceWatch& watch) {
  auto map = sysfs_.FindMapNamed(name);
  if (!map) {
    return absl::OkStatus();
  }
  // With every path dead and queue_if_no_path, a flush would wait forever (holding mu_).
  (void)Run({"multipathd", "disablequeueing", "map", name}, kToolTimeout);
  SH_RETURN_IF_ERROR(options_.release(DevNode(map->block)));
  // `multipath -f` fails while udev or blkid still has the map open for a moment: try again on
  // each event, bounded.
  std::string last;
  auto removed = watch.WaitFor(
      [&]() -> std::optional<std::string> {
        if (!sysfs_.FindMapNamed(name)) {
          return name;
        }
        auto r = Run({"multipath", "-f", name}, kToolTimeout);
        last = r.ok() ? r->output : std::string(r.status().message());
        return sysfs_.FindMapNamed(name) ? std::nullopt : std::optional<std::string>(name);
      },
      options_.map_timeout, absl::StrCat("dm-multipath map ", name, " to go"));
  if (!removed.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove dm-multipath map ", name, ": ", last));
  }
  return absl::OkStatus();
}

absl::Status KernelTransport::RemovePath(const state::v1::KernelSessionRecord& session,
                                         const state::v1::KernelPath& path, DeviceWatch& watch) {
  const iscsi::Portal portal = PathPortal(path);
  const std::string p = portal.ToString();
  auto s = sysfs_.FindSession(path.iqn(), portal.host, portal.port);
  if (s) {
    // Until the LUN's SCSI device is gone from the session.
    auto wait_gone = [&](const std::string& name) {
      return watch
          .WaitFor(
              [&]() -> std::optional<std::string> {
                if (sysfs_.SessionDisk(*s, path.lun())) {
                  return std::nullopt;
                }
                return name;
              },
              options_.device_timeout, absl::StrCat(name, " to go"))
          .status();
    };
    if (auto d = sysfs_.SessionDisk(*s, path.lun()); d && !d->disk.empty()) {
      const iscsi::LunIdentity want = iscsi::FromProto(session.identity());
      if (!want.Empty()) {
        auto now = sysfs_.DiskIdentity(d->disk);
        if (!now.ok()) {
          return absl::FailedPreconditionError(
              absl::StrCat("cannot read the identity of ", d->disk, " (LUN ", path.lun(), " of ",
                           path.iqn(), " at ", p, "): ", now.status().message(), "; left alone"));
        }
        if (!iscsi::CheckSameLun(want, *now).ok()) {
          return absl::FailedPreconditionError(
              absl::StrCat(d->disk, " (LUN ", path.lun(), " of ", path.iqn(), " at ", p,
                           ") now reports ", iscsi::DescribeIdentity(*now), ", not the staged ",
                           iscsi::DescribeIdentity(want), "; left alone"));
        }
      }
      // A multipath map over this LUN that the record does not name (an attach cut short
      // between map and record) would hold the disk for good. A map with paths that are not
      // this record's is another volume's, which multipathd gave this disk as a new path of a
      // known WWID: only the path leaves it.
      if (auto holder = sysfs_.MapHolding(d->disk)) {
        if (holder->name == session.multipath_map() || MapIsOurs(*holder, session)) {
          SH_RETURN_IF_ERROR(RemoveMap(holder->name, watch));
        } else {
          SH_RETURN_IF_ERROR(RemovePathFromMap(*holder, d->disk, watch));
        }
      }
      if (!session.multipath_map().empty()) {
        // Undo `multipath -a`, so that a later single-path stage of this LUN is not claimed.
        (void)Run({"multipath", "-w", DevNode(d->disk)}, kToolTimeout);
      }
      SH_RETURN_IF_ERROR(options_.release(DevNode(d->disk)));
      SH_RETURN_IF_ERROR(sysfs_.DeleteDisk(d->disk));
      SH_RETURN_IF_ERROR(wait_gone(d->disk));
      Log(kComponent).info("deleted {} (LUN {} of {} at {})", d->disk, path.lun(), path.iqn(), p);
    } else if (d) {
      // Scanned but never a block device (an attach that timed out before udev, or not a
      // disk): nothing can hold it, and left alone it would keep the session logged in.
      SH_RETURN_IF_ERROR(sysfs_.DeleteScsiDevice(d->hctl));
      SH_RETURN_IF_ERROR(wait_gone(d->hctl));
      Log(kComponent)
          .info("deleted SCSI device {} (LUN {} of {} at {}; it had no block device)", d->hctl,
                path.lun(), path.iqn(), p);
    }
    const std::vector<ScsiDisk> others = sysfs_.SessionDisks(*s);
    if (!others.empty()) {
      std::vector<std::string> names;
      for (const ScsiDisk& o : others) {
        names.push_back(absl::StrCat(o.hctl, o.disk.empty() ? "" : " ", o.disk));
      }
      Log(kComponent)
          .info("session {} to {} at {} stays logged in: in use by {}", s->sid, path.iqn(), p,
                absl::StrJoin(names, ", "));
      return absl::OkStatus();
    }
    SH_ASSIGN_OR_RETURN(ProcessResult out,
                        Run({"iscsiadm", "-m", "node", "-T", path.iqn(), "-p", p, "--logout"},
                            options_.login_timeout));
    if (out.exit_code != kIscsiErrNoObjectsFound && out.exit_code != kIscsiErrSessionNotFound) {
      SH_RETURN_IF_ERROR(IscsiadmStatus(out, absl::StrCat("log out of ", path.iqn(), " at ", p)));
    }
    Log(kComponent).info("logged out of {} at {}", path.iqn(), p);
  }
  // No session of ours is left on this portal: drop the record (it holds the CHAP secrets).
  SH_ASSIGN_OR_RETURN(
      ProcessResult del,
      Run({"iscsiadm", "-m", "node", "-o", "delete", "-T", path.iqn(), "-p", p}, kToolTimeout));
  if (del.exit_code != 0 && del.exit_code != kIscsiErrNoObjectsFound) {
    Log(kComponent)
        .warn("cannot delete the node record of {} at {}: {}", path.iqn(), p,
              IscsiadmStatus(del, "delete the node record"));
  }
  return absl::OkStatus();
}

absl::Status KernelTransport::DetachLocked(const state::v1::KernelSessionRecord& session,
                                           DeviceWatch& watch) {
  if (!session.multipath_map().empty()) {
    SH_RETURN_IF_ERROR(RemoveMap(session.multipath_map(), watch));
  }
  absl::Status first;
  for (const state::v1::KernelPath& path : session.paths()) {
    // Every path gets its turn, even when one fails: a dead portal must not keep the others.
    if (auto s = RemovePath(session, path, watch); !s.ok() && first.ok()) {
      first = s;
    }
  }
  return first;
}

}  // namespace stagehand::transport::kernel
