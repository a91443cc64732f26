#pragma once

// What the kernel's iSCSI initiator and SCSI layer show in sysfs: open-iscsi sessions, the SCSI
// disks on them, their identity (VPD pages), state and size, and dm-multipath maps over them.
// Every path is under a root directory so that unit tests can build a tree of their own.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "iscsi/lun_capacity.h"
#include "iscsi/lun_identity.h"

namespace stagehand::transport::kernel {

struct KernelSession {
  int sid = 0;      // /sys/class/iscsi_session/session<sid>
  int host = 0;     // SCSI host number (host<host>)
  std::string iqn;  // targetname
  std::string address;
  uint16_t port = 0;
  std::string state;  // "LOGGED_IN", "FAILED", "FREE"
};

struct ScsiDisk {
  std::string hctl;  // "2:0:0:1"
  uint32_t lun = 0;
  std::string disk;  // "sdb"; empty while the block device is not there (yet)
};

class KernelSysfs {
 public:
  explicit KernelSysfs(std::string root = "/sys") : root_(std::move(root)) {}

  const std::string& root() const { return root_; }

  std::vector<KernelSession> Sessions() const;
  // The session to `iqn` through `address:port`, if logged in (in any state).
  std::optional<KernelSession> FindSession(std::string_view iqn, std::string_view address,
                                           uint16_t port) const;
  // The SCSI devices of a session (every LUN scanned on it).
  std::vector<ScsiDisk> SessionDisks(const KernelSession& session) const;
  std::optional<ScsiDisk> SessionDisk(const KernelSession& session, uint32_t lun) const;

  // Asks the kernel to scan one LUN of the session's host ("- - <lun>" to scsi_host/.../scan).
  // Returns when the scan finished (the write is synchronous).
  absl::Status ScanLun(int host, uint32_t lun) const;

  // sysfs path of a block device: <root>/class/block/<name>.
  std::string BlockPath(std::string_view name) const;
  absl::StatusOr<iscsi::LunIdentity> DiskIdentity(std::string_view disk) const;
  absl::StatusOr<iscsi::LunCapacity> Capacity(std::string_view block) const;
  std::string DiskState(std::string_view disk) const;  // "running", "offline", ...; "" if gone
  absl::Status DeleteDisk(std::string_view disk) const;
  // Deletes a SCSI device by H:C:T:L (one without a block device).
  absl::Status DeleteScsiDevice(std::string_view hctl) const;
  absl::Status RescanDisk(std::string_view disk) const;

  // The dm device ("dm-3") whose slaves are exactly `disks`, if any; its name (dm/name).
  struct DmMap {
    std::string block;  // "dm-3"
    std::string name;   // "3600140…" (the WWID, user_friendly_names no) or "mpatha"
    std::vector<std::string> slaves;
  };

  std::optional<DmMap> FindMapOver(const std::vector<std::string>& disks) const;
  std::optional<DmMap> FindMapNamed(std::string_view name) const;
  // The multipath map that holds `disk` (its holders/), if any.
  std::optional<DmMap> MapHolding(std::string_view disk) const;

 private:
  std::optional<DmMap> ReadMap(const std::string& block) const;
  std::optional<DmMap> FindMap(const std::function<bool(const DmMap&)>& match) const;

  std::string root_;
};

}  // namespace stagehand::transport::kernel
