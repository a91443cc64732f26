#pragma once

// `Mounter` backed by libmount (mounts, mount table) and mount(2)/umount2(2) (binds, unmounts).

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "mounter/mounter.h"

namespace stagehand::mounter {

// Mounts in the caller's mount namespace. Never writes /etc/mtab or /run/mount/utab, never runs
// /sbin/mount.<type> helpers and never reads /etc/fstab: what it does is exactly what it is asked.
// Requires CAP_SYS_ADMIN for everything but `List` and `Find`. Thread-compatible.
class LibmountMounter : public Mounter {
 public:
  // `mountinfo_path` is read by `List` and `Find`; tests may point it at a fixture file.
  explicit LibmountMounter(std::string mountinfo_path = "/proc/self/mountinfo");

  absl::Status Mount(const MountRequest& req) override;
  absl::Status Bind(const std::string& source, const std::string& target, bool readonly,
                    const std::vector<std::string>& options) override;
  absl::Status Unmount(const std::string& target) override;
  absl::StatusOr<std::vector<MountInfo>> List() const override;
  absl::StatusOr<std::optional<MountInfo>> Find(const std::string& target) const override;

 private:
  std::string mountinfo_path_;
};

}  // namespace stagehand::mounter
