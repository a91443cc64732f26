#pragma once

// The mount seam: mounting, bind-mounting, unmounting and listing filesystems in the caller's
// mount namespace. The real implementation is `LibmountMounter`; tests use a fake.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand::mounter {

struct MountRequest {
  std::string source;  // Block device, e.g. "/dev/disk/by-path/ip-…-lun-0".
  std::string target;  // Clean absolute directory; must exist.
  std::string fstype;  // "ext4", "xfs"; never empty (probe first).
  // "ro", "noatime", …; none may be empty or contain ',' (but a quoted context="...", which
  // keeps its commas: JoinMountOptions).
  std::vector<std::string> options;
};

// One line of /proc/self/mountinfo.
struct MountInfo {
  std::string source;      // Mount source as the kernel reports it ("/dev/loop3", "tmpfs", …).
  std::string target;      // Mount point.
  std::string fstype;      // "ext4", "xfs", "tmpfs", …
  std::string options;     // Per-mount (VFS) and superblock options, comma-joined.
  std::string fs_options;  // Superblock options alone ("rw,errors=remount-ro,emergency_ro").
  std::string root;        // Path within the filesystem that is mounted ("/" unless a bind mount).
};

// Mounts, unmounts and lists filesystems in the caller's mount namespace.
//
// Implementations are idempotent: repeating a mount that already exists and unmounting a target
// that is not mounted both return OK. Thread-safe for different targets: the node service calls
// them from its gRPC threads, one volume at a time per volume (its per-volume lock); each call
// works on its own libmount context and reads the mount table afresh. Two calls on the same
// target at once are the caller's bug. They never log above debug; callers log.
class Mounter {
 public:
  virtual ~Mounter() = default;

  // Mounts `req.source` at `req.target`; the target must exist. OK if exactly this source is
  // already mounted there with the same read-only state.
  // InvalidArgument: `target` is not a clean absolute path, `source` or `fstype` is empty, or an
  // option is malformed.
  // FailedPrecondition: `target` already holds a different mount, or the device is busy.
  // NotFound: `source` or `target` does not exist.
  // A failure's message ends with what the kernel logged about the device meanwhile, where it
  // can be read ("; the kernel says: XFS (loop3): Filesystem has duplicate UUID …").
  virtual absl::Status Mount(const MountRequest& req) = 0;

  // Bind-mounts `source` (a directory or file, or a block device node onto a file) at `target`,
  // which must exist; not recursive. If `readonly`, the bind mount is then made read-only.
  // `options` are per-mount flags applied together with it: "nosuid", "nodev", "noexec",
  // "noatime", "nodiratime", "relatime", "strictatime", "ro". Restrictions the source's mount
  // already has (ro, nosuid, nodev, noexec) are kept. OK if `source` is already bind-mounted at
  // `target` with the same read-only state (other flags are not compared). Never leaves a
  // writable bind behind when the read-only step fails.
  // InvalidArgument: a path is not clean and absolute, or an option is unknown.
  // FailedPrecondition: `target` already holds a different mount or a different read-only state.
  // NotFound: `source` or `target` does not exist.
  virtual absl::Status Bind(const std::string& source, const std::string& target, bool readonly,
                            const std::vector<std::string>& options) = 0;

  // Unmounts the topmost mount at `target` (never lazily). OK if nothing is mounted there or
  // `target` does not exist.
  // InvalidArgument: `target` is not a clean absolute path.
  // FailedPrecondition: the mount is busy (EBUSY); retry once its users are gone.
  virtual absl::Status Unmount(const std::string& target) = 0;

  // All mounts of this mount namespace, in /proc/self/mountinfo order.
  virtual absl::StatusOr<std::vector<MountInfo>> List() const = 0;

  // The topmost mount whose target equals `target` exactly, or nullopt.
  virtual absl::StatusOr<std::optional<MountInfo>> Find(const std::string& target) const = 0;
};

}  // namespace stagehand::mounter
