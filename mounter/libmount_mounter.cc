#include "mounter/libmount_mounter.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <array>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "base/paths.h"
#include "mounter/kernel_log.h"
#include "mounter/libmount_handles.h"
#include "mounter/mount_options.h"

namespace stagehand::mounter {
namespace {

// A mountinfo line with the fields `MountInfo` does not expose.
struct MountEntry {
  MountInfo info;
  int id = 0;
  int parent_id = 0;
  std::string vfs_options;  // Per-mount options only: "ro,nosuid,…".
};

std::string OrEmpty(const char* s) {
  return s == nullptr ? std::string() : std::string(s);
}

// Like ErrnoStatus, but EBUSY means "in use": do not hot-retry (STYLE §2.4).
absl::Status MountErrnoStatus(int errno_value, std::string_view what) {
  absl::Status s = ErrnoStatus(errno_value, what);
  if (errno_value == EBUSY) {
    return absl::FailedPreconditionError(s.message());
  }
  return s;
}

absl::Status CheckLibmountRc(int rc, std::string_view what) {
  if (rc == 0) {
    return absl::OkStatus();
  }
  return ErrnoStatus(rc < 0 ? -rc : EINVAL, absl::StrCat("libmount ", ToAbsl(what)));
}

// An unreadable mount table is transient as far as callers can tell: retry.
absl::Status TableUnavailable(int errno_value, std::string_view what) {
  return absl::UnavailableError(ErrnoStatus(errno_value, what).message());
}

absl::StatusOr<std::vector<MountEntry>> ReadMountTable(const std::string& path) {
  MntTable table(mnt_new_table());
  if (!table) {
    return absl::ResourceExhaustedError("mnt_new_table");
  }
  // mnt_table_parse_file (what mnt_new_table_from_file calls) keeps the negative errno that
  // mnt_new_table_from_file would drop.
  if (int rc = mnt_table_parse_file(table.get(), path.c_str()); rc != 0) {
    return TableUnavailable(rc < 0 ? -rc : EINVAL, absl::StrCat("read mount table '", path, "'"));
  }
  MntIter iter(mnt_new_iter(MNT_ITER_FORWARD));
  if (!iter) {
    return absl::ResourceExhaustedError("mnt_new_iter");
  }
  std::vector<MountEntry> entries;
  libmnt_fs* fs = nullptr;  // Borrowed: owned by `table`.
  int rc = 0;
  while ((rc = mnt_table_next_fs(table.get(), iter.get(), &fs)) == 0) {
    MountEntry e;
    e.info.source = OrEmpty(mnt_fs_get_source(fs));
    e.info.target = OrEmpty(mnt_fs_get_target(fs));
    e.info.fstype = OrEmpty(mnt_fs_get_fstype(fs));
    e.info.options = OrEmpty(mnt_fs_get_options(fs));
    e.info.fs_options = OrEmpty(mnt_fs_get_fs_options(fs));
    e.info.root = OrEmpty(mnt_fs_get_root(fs));
    e.id = mnt_fs_get_id(fs);
    e.parent_id = mnt_fs_get_parent_id(fs);
    e.vfs_options = OrEmpty(mnt_fs_get_vfs_options(fs));
    entries.push_back(std::move(e));
  }
  if (rc < 0) {
    return TableUnavailable(-rc, absl::StrCat("iterate mount table '", path, "'"));
  }
  return entries;
}

// Among the mounts at `target`, the one no other mount at `target` is stacked on.
std::optional<MountEntry> TopmostAt(const std::vector<MountEntry>& entries,
                                    const std::string& target) {
  std::vector<const MountEntry*> stack;
  for (const MountEntry& e : entries) {
    if (e.info.target == target) {
      stack.push_back(&e);
    }
  }
  const MountEntry* top = nullptr;
  for (const MountEntry* candidate : stack) {
    bool covered = false;
    for (const MountEntry* other : stack) {
      if (other != candidate && other->parent_id == candidate->id) {
        covered = true;
        break;
      }
    }
    if (!covered) {
      top = candidate;  // The last uncovered one wins if the table is inconsistent.
    }
  }
  if (top == nullptr) {
    return std::nullopt;
  }
  return *top;
}

absl::StatusOr<struct stat> Stat(const std::string& path) {
  struct stat st = {};
  if (stat(path.c_str(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("stat '", path, "'"));
  }
  return st;
}

absl::Status CheckReadOnlyState(const MountEntry& existing, bool readonly) {
  const bool existing_ro = HasMountOption(existing.vfs_options, "ro");
  if (existing_ro == readonly) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("'", existing.info.target,
                                                    "' is already mounted ",
                                                    existing_ro ? "read-only" : "read-write"));
}

absl::Status DifferentMountError(const MountEntry& existing, std::string_view wanted) {
  return absl::FailedPreconditionError(absl::StrCat(
      "'", existing.info.target, "' already holds a mount of '", existing.info.source, "' (",
      existing.info.fstype, ", root '", existing.info.root, "'), not '", ToAbsl(wanted), "'"));
}

// Decides whether `existing` (the topmost mount at `req.target`) is the mount `req` asks for.
absl::Status CheckExistingMount(const MountEntry& existing, const MountRequest& req,
                                bool readonly) {
  bool same = false;
  absl::StatusOr<struct stat> src = Stat(req.source);
  if (src.ok() && S_ISBLK(src->st_mode)) {
    // mountinfo may name the device differently (symlinks, /dev/root); the filesystem on the
    // target reports the device number of the block device it lives on.
    SH_ASSIGN_OR_RETURN(struct stat tgt, Stat(req.target));
    same = tgt.st_dev == src->st_rdev && existing.info.root == "/";
  } else {
    same = existing.info.source == req.source && existing.info.fstype == req.fstype;
  }
  if (!same) {
    return DifferentMountError(existing, req.source);
  }
  return CheckReadOnlyState(existing, readonly);
}

absl::Status MountFailure(libmnt_context* cxt, int rc, std::string_view what) {
  std::array<char, 1024> detail{};
  mnt_context_get_excode(cxt, rc, detail.data(), detail.size());
  absl::Status s;
  if (int syscall_errno = mnt_context_get_syscall_errno(cxt); syscall_errno != 0) {
    s = MountErrnoStatus(syscall_errno, what);
  } else if (rc < 0) {
    s = MountErrnoStatus(-rc, what);
  } else {
    s = absl::InternalError(absl::StrCat(ToAbsl(what), ": libmount returned ", rc));
  }
  if (detail[0] == '\0') {
    return s;
  }
  return {s.code(), absl::StrCat(s.message(), " (", detail.data(), ")")};
}

// Second step of a bind mount: per-mount flags can only be set by remounting (mount(2)).
absl::Status RestrictBind(const std::string& target, uint64_t flags, std::string_view what) {
  struct statvfs vfs = {};
  if (statvfs(target.c_str(), &vfs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("statvfs ", ToAbsl(what)));
  }
  flags |= InheritedBindFlags(vfs.f_flag, flags);
  if (mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | flags, nullptr) != 0) {
    return MountErrnoStatus(errno, absl::StrCat("remount ", ToAbsl(what)));
  }
  return absl::OkStatus();
}

}  // namespace

LibmountMounter::LibmountMounter(std::string mountinfo_path)
    : mountinfo_path_(std::move(mountinfo_path)) {}

absl::Status LibmountMounter::Mount(const MountRequest& req) {
  if (!IsCleanAbsolutePath(req.target)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mount target '", req.target, "' is not a clean absolute path"));
  }
  if (req.source.empty() || req.fstype.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mount on '", req.target, "' needs a source and a filesystem type"));
  }
  SH_ASSIGN_OR_RETURN(const std::string options, JoinMountOptions(req.options));
  const bool readonly = HasMountOption(options, "ro");
  SH_ASSIGN_OR_RETURN(const std::vector<MountEntry> entries, ReadMountTable(mountinfo_path_));
  if (std::optional<MountEntry> existing = TopmostAt(entries, req.target)) {
    return CheckExistingMount(*existing, req, readonly);
  }

  const std::string what = absl::StrCat("mount '", req.source, "' on '", req.target, "'");
  MntContext cxt(mnt_new_context());
  if (!cxt) {
    return absl::ResourceExhaustedError("mnt_new_context");
  }
  // No mount.<type> helpers, no mtab/utab, no fstab: the request is the whole truth. Without
  // rwonly, libmount silently retries read-only when the device is write-protected (EROFS or
  // EACCES); a read-write request must fail instead.
  SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_disable_helpers(cxt.get(), 1), what));
  SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_disable_mtab(cxt.get(), 1), what));
  SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_set_optsmode(cxt.get(), MNT_OMODE_NOTAB), what));
  SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_enable_rwonly_mount(cxt.get(), 1), what));
  SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_set_source(cxt.get(), req.source.c_str()), what));
  SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_set_target(cxt.get(), req.target.c_str()), what));
  SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_set_fstype(cxt.get(), req.fstype.c_str()), what));
  if (!options.empty()) {
    SH_RETURN_IF_ERROR(CheckLibmountRc(mnt_context_set_options(cxt.get(), options.c_str()), what));
  }
  KernelLogWindow kernel_log = KernelLogWindow::Open();
  const int rc = mnt_context_mount(cxt.get());
  if (rc == 0 && mnt_context_get_status(cxt.get()) == 1) {
    return absl::OkStatus();
  }
  absl::Status failed = MountFailure(cxt.get(), rc, what);
  const std::vector<std::string> said = kernel_log.MessagesAbout(req.source);
  if (said.empty()) {
    return failed;
  }
  return {failed.code(),
          absl::StrCat(failed.message(), "; the kernel says: ", absl::StrJoin(said, "; "))};
}

absl::Status LibmountMounter::Bind(const std::string& source, const std::string& target,
                                   bool readonly, const std::vector<std::string>& options) {
  if (!IsCleanAbsolutePath(source) || !IsCleanAbsolutePath(target)) {
    return absl::InvalidArgumentError(absl::StrCat("bind mount '", source, "' on '", target,
                                                   "': paths must be clean and absolute"));
  }
  SH_ASSIGN_OR_RETURN(const uint64_t flags, BindRemountFlags(readonly, options));
  const bool want_ro = (flags & MS_RDONLY) != 0;
  SH_ASSIGN_OR_RETURN(const struct stat src, Stat(source));
  SH_ASSIGN_OR_RETURN(const std::vector<MountEntry> entries, ReadMountTable(mountinfo_path_));
  if (std::optional<MountEntry> existing = TopmostAt(entries, target)) {
    // A bind mount's root is the source inode itself, so the target resolves to the same inode
    // (for a device node: the same node, or at least the same device number).
    SH_ASSIGN_OR_RETURN(const struct stat tgt, Stat(target));
    const bool same_inode = tgt.st_dev == src.st_dev && tgt.st_ino == src.st_ino;
    const bool same_device =
        S_ISBLK(src.st_mode) && S_ISBLK(tgt.st_mode) && tgt.st_rdev == src.st_rdev;
    if (!same_inode && !same_device) {
      return DifferentMountError(*existing, source);
    }
    return CheckReadOnlyState(*existing, want_ro);
  }

  const std::string what = absl::StrCat("bind mount '", source, "' on '", target, "'");
  if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return MountErrnoStatus(errno, what);
  }
  if (flags == 0) {
    return absl::OkStatus();
  }
  if (absl::Status s = RestrictBind(target, flags, what); !s.ok()) {
    // Roll back: never leave a writable (or suid) bind where a restricted one was asked for.
    if (umount2(target.c_str(), UMOUNT_NOFOLLOW) != 0) {
      const absl::Status rollback = ErrnoStatus(errno, "rolling back failed");
      return absl::InternalError(absl::StrCat(s.message(), "; ", rollback.message(), "; '", target,
                                              "' is left bind-mounted with default flags"));
    }
    return s;
  }
  return absl::OkStatus();
}

absl::Status LibmountMounter::Unmount(const std::string& target) {
  if (!IsCleanAbsolutePath(target)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unmount target '", target, "' is not a clean absolute path"));
  }
  // No MNT_DETACH: a lazy unmount would hide EBUSY, and we want it surfaced. UMOUNT_NOFOLLOW:
  // as root, never unmount whatever a symlink planted in a volume directory points at.
  if (umount2(target.c_str(), UMOUNT_NOFOLLOW) == 0) {
    return absl::OkStatus();
  }
  const int e = errno;
  if (e == EINVAL || e == ENOENT) {  // Not a mount point, or no such path: nothing to undo.
    return absl::OkStatus();
  }
  return MountErrnoStatus(e, absl::StrCat("unmount '", target, "'"));
}

absl::StatusOr<std::vector<MountInfo>> LibmountMounter::List() const {
  SH_ASSIGN_OR_RETURN(std::vector<MountEntry> entries, ReadMountTable(mountinfo_path_));
  std::vector<MountInfo> infos;
  infos.reserve(entries.size());
  for (MountEntry& e : entries) {
    infos.push_back(std::move(e.info));
  }
  return infos;
}

absl::StatusOr<std::optional<MountInfo>> LibmountMounter::Find(const std::string& target) const {
  SH_ASSIGN_OR_RETURN(const std::vector<MountEntry> entries, ReadMountTable(mountinfo_path_));
  std::optional<MountEntry> top = TopmostAt(entries, target);
  if (!top) {
    return std::optional<MountInfo>();
  }
  return std::optional<MountInfo>(std::move(top->info));
}

}  // namespace stagehand::mounter
