#pragma once

// Pure validation and translation of mount options; no system calls.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace stagehand::mounter {

// One mount option that cannot change what the options around it mean once they are joined:
// not empty, no control character (NUL would cut the string), no backslash, and no ',' or '"'
// except in the one form that needs them, a quoted SELinux context (IsQuotedContextOption).
// libmount splits on commas outside double quotes and keeps one quote state across the whole
// string: a stray quote in one option would hide the commas of the next ones.
// InvalidArgument naming the option otherwise.
absl::Status CheckMountOption(std::string_view option);

// Joins `options` with ',' for libmount. InvalidArgument: an option fails CheckMountOption.
absl::StatusOr<std::string> JoinMountOptions(const std::vector<std::string>& options);

// The kubelet's SELinux mount option: `context="user:role:type:level"`, quoted because an MLS
// level holds commas (s0:c15,c25); libmount and the kernel keep a quoted value whole. True only
// for that form: one pair of quotes around the whole value, nothing after them.
bool IsQuotedContextOption(std::string_view option);

// The SELinux context the `context=` option in `options` names (without quotes), or "" if
// there is none.
std::string SelinuxContext(const std::vector<std::string>& options);

// The MS_* flags for the MS_REMOUNT|MS_BIND step of a bind mount: MS_RDONLY if `readonly`, plus
// one flag per option. Known options: "ro", "nosuid", "nodev", "noexec", "noatime",
// "nodiratime", "relatime", "strictatime". MS_REMOUNT and MS_BIND are not included.
// InvalidArgument: an unknown option (including "rw", since a bind flag set is exhaustive).
absl::StatusOr<uint64_t> BindRemountFlags(bool readonly, const std::vector<std::string>& options);

// The per-mount flags a fresh bind mount already carries that its MS_REMOUNT|MS_BIND step must
// repeat. `statvfs_flags` is statvfs(3)'s `f_flag` (ST_*) of the bind; the result is MS_* flags.
// A bind remount replaces the whole per-mount flag set, so leaving these out would drop
// restrictions inherited from the source mount (ro, nosuid, nodev, noexec), and in a user
// namespace the kernel refuses that with EPERM. Atime flags are inherited only if `requested`
// (MS_* flags) has none of its own.
uint64_t InheritedBindFlags(uint64_t statvfs_flags, uint64_t requested);

// True if the comma-separated `option_list` contains `option` as a whole entry.
bool HasMountOption(std::string_view option_list, std::string_view option);

}  // namespace stagehand::mounter
