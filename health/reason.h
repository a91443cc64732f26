#pragma once

// The problems a volume of the built-in driver can have, as one typed table: each reason's
// CamelCase name (what CSI's NodeGetVolumeHealth, metrics and stagehandctl show), its severity,
// whether it heals by itself, and what it says about the storage behind it (NodeGetStorageHealth).
// A reason is spelled once, in reason.cc; everything else names it by its enumerator. The
// README's health table is checked against this one by a unit test.

#include <optional>
#include <span>
#include <string_view>

namespace stagehand::health {

enum class Reason {
  kSessionReconnecting,       // The target does not answer; I/O waits.
  kReplacementTimeoutPassed,  // Reconnecting past the replacement timeout; I/O fails.
  kSessionRestarting,         // The session process ended; its successor takes over.
  kSessionStopped,            // The session process is stopped (SIGSTOP, a debugger).
  kSessionNotAnswering,       // It runs but its loop or its I/O does not move.
  kSessionGone,               // The process ended and nothing restarts it.
  kSessionDown,               // The session is down (kernel: no session or disk).
  kLoopDeviceGone,            // The loop device no longer serves the LUN file.
  kLoopDeviceDetaching,       // `losetup -d` under a mounted volume.
  kFuseConnectionAborted,     // The FUSE connection under the loop device was aborted.
  kLunIdentityChanged,        // The LUN is another one now: I/O fails closed.
  kLunCapacityShrunk,         // The LUN got smaller than staged: I/O fails closed.
  kStagingMountMissing,       // Nothing mounted at the staging path.
  kPublishMountMissing,       // Nothing mounted at a publish path.
  kFilesystemFailed,          // The filesystem aborted, shut down or went read-only.
  kFilesystemErrors,          // The filesystem recorded errors since its last check.
  kMultipathDegraded,         // Some paths of a dm-multipath map fail.
  kSessionUnsupervised,       // The session serves, but nothing would replace it if it died.
  kFuseRequestsLost,          // A dead io_uring ring held requests: what waits on them hangs.
  kFenced,                    // Another node took the LUN's reservation over: I/O fails closed.
  kUnreserved,  // A single-node volume served without a reservation (the target has none).
};

// What the problem does to the volume: CSI's VolumeHealthErrorType.
enum class Severity {
  kDegraded,      // It still works (with less redundancy, or until something else happens).
  kInaccessible,  // I/O waits or fails.
  kDataLoss,      // Data written is gone.
};

// What the problem says about the storage the node uses (CSI's StorageHealthErrorType).
enum class StorageClass {
  kNone,         // Nothing about the storage: the node's own side.
  kUnreachable,  // The target does not answer.
  kDegraded,     // The target answers on fewer paths.
};

struct ReasonInfo {
  Reason reason;
  std::string_view name;  // CamelCase.
  Severity severity;
  bool heals;  // Goes away without anyone acting (the target comes back, a successor serves).
  StorageClass storage;
  // The staging still stands while it lasts: a repeated NodeStageVolume is satisfied and a
  // NodePublishVolume may bind it (a successor process takes over the same device).
  bool staging_stands;
};

// Every reason, in the order of the enum.
std::span<const ReasonInfo> AllReasons();

const ReasonInfo& Info(Reason reason);

inline std::string_view Name(Reason reason) {
  return Info(reason).name;
}

// The reason named `name`; nullopt for a name stagehand does not use (another driver's).
std::optional<Reason> ReasonNamed(std::string_view name);

// The CamelCase name NodeGetStorageHealth gives a class ("TargetUnreachable", "PathsDegraded");
// empty for kNone.
std::string_view StorageReasonName(StorageClass storage);

// "DEGRADED", "INACCESSIBLE", "DATA_LOSS": CSI's names of the severities.
std::string_view SeverityName(Severity severity);

}  // namespace stagehand::health
