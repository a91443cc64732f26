#pragma once

// The kernel transport: the host's iSCSI initiator driven through open-iscsi (`iscsiadm`), the
// LUN found as a SCSI disk through sysfs and udev, and several portals joined into one
// dm-multipath device by multipathd. Sessions belong to the kernel, so the agent can restart
// freely; a session is logged out only when no LUN on it is left.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "base/mutex.h"
#include "transport/kernel/device_watch.h"
#include "transport/kernel/iscsiadm.h"
#include "transport/kernel/kernel_sysfs.h"
#include "transport/kernel/reservation_renewer.h"
#include "transport/transport.h"

namespace stagehand::transport::kernel {

struct KernelTransportOptions {
  std::string sysfs_root = "/sys";
  std::string dev_dir = "/dev";
  std::string nodes_dir = "/etc/iscsi/nodes";  // open-iscsi's node records (Debian, Ubuntu).
  CommandRunner run;                           // RunProcess when empty.
  // A udev watch when empty.
  std::function<absl::StatusOr<std::unique_ptr<DeviceWatch>>()> watch;
  // Flushes a block device's buffers and checks that nothing holds it (not mounted, not a
  // multipath slave): FailedPrecondition when it is in use. O_EXCL open + BLKFLSBUF when empty.
  std::function<absl::Status(const std::string& device)> release;
  // Scans one LUN of a SCSI host and returns when the scan is done. KernelSysfs::ScanLun when
  // empty.
  std::function<absl::Status(int host, uint32_t lun)> scan;
  // The reservation commands on a path's disk ("sdb"): DiskReservations on its device node
  // when empty (refused while the disk is not running: a command to a path that is down waits
  // for the kernel's replacement timeout).
  OpenReservations open_reservations;
  std::chrono::seconds login_timeout{45};
  std::chrono::seconds device_timeout{30};
  std::chrono::seconds map_timeout{30};
};

// Its name, and the name of its kind of session record.
inline constexpr char kName[] = "kernel";

class KernelTransport : public Transport {
 public:
  explicit KernelTransport(KernelTransportOptions options);

  std::string_view Name() const override { return kName; }

  void Prepare(const AttachRequest& request, state::v1::SessionRecord* session) override;
  absl::StatusOr<Attachment> Attach(const AttachRequest& request) override;
  absl::Status Detach(const state::v1::SessionRecord& session) override;
  absl::StatusOr<uint64_t> RefreshCapacity(const state::v1::SessionRecord& session) override;
  SessionHealth Health(const state::v1::SessionRecord& session) override;
  SessionDescription Describe(const state::v1::SessionRecord& session) override;
  absl::Status Resume(const state::v1::SessionRecord& session) override;
  // Claims the LUN on every path's disk and renews it from then on, or gives the claim up.
  // Unavailable while a path is down (every path must be registered before a write).
  absl::StatusOr<WriterChange> SetWriter(const state::v1::SessionRecord& session,
                                         const AttachRequest& request) override;

 private:
  // How long one iscsiadm or multipath(d) call may take.
  static constexpr std::chrono::seconds kToolTimeout{20};

  absl::StatusOr<ProcessResult> Run(const std::vector<std::string>& argv,
                                    std::chrono::seconds timeout) const;
  absl::Status Login(const AttachRequest& request, const iscsi::TargetSpec& target,
                     const iscsi::Portal& portal, bool multipath);
  absl::StatusOr<std::string> ScanDisk(DeviceWatch& watch, const iscsi::Portal& portal,
                                       const std::string& iqn, uint32_t lun);
  absl::StatusOr<KernelSysfs::DmMap> AssembleMap(DeviceWatch& watch,
                                                 const std::vector<std::string>& disks);
  absl::Status DetachLocked(const state::v1::KernelSessionRecord& session, DeviceWatch& watch);
  absl::Status RemoveMap(const std::string& name, DeviceWatch& watch);
  // True when every path of `map` is a disk of `session`'s paths (a map an attach of this
  // record made), false when it also has others (another volume's).
  bool MapIsOurs(const KernelSysfs::DmMap& map, const state::v1::KernelSessionRecord& session);
  // Takes `disk` out of another volume's map, leaving the map and its other paths.
  absl::Status RemovePathFromMap(const KernelSysfs::DmMap& map, const std::string& disk,
                                 DeviceWatch& watch);
  absl::Status RemovePath(const state::v1::KernelSessionRecord& session,
                          const state::v1::KernelPath& path, DeviceWatch& watch);
  std::string DevNode(std::string_view block) const;
  // Claims the LUN behind `disks` for `request`'s single-node volume and renews it from now on
  // (kernel_reservation.cc): records the reservation file, or that the volume is unreserved.
  absl::Status Reserve(const AttachRequest& request, const std::vector<std::string>& disks,
                       Attachment& a);
  // Stops renewing and gives up the reservation of `session` (logged when it cannot: other
  // nodes then wait for the takeover time).
  void Unreserve(const state::v1::KernelSessionRecord& session);

  KernelTransportOptions options_;
  KernelSysfs sysfs_;
  std::unique_ptr<ReservationRenewer> renewer_;
  // Serialises attach, detach and capacity refresh: logins, scans and the last-LUN-out logout
  // of a shared session must not interleave.
  Mutex mu_;
};

// OK when this host can use the kernel transport: the kernel has the iSCSI initiator
// (iscsi_tcp loaded or loadable) and iscsid answers. FailedPrecondition saying what is missing
// otherwise.
absl::Status KernelInitiatorAvailable(const std::string& sysfs_root = "/sys");

// Resolves a portal's host name to an address (kept as is when it already is one), as the
// kernel reports it in sysfs. Unavailable when it does not resolve.
absl::StatusOr<iscsi::Portal> ResolvePortal(const iscsi::Portal& portal);

}  // namespace stagehand::transport::kernel
