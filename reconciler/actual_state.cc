#include "reconciler/actual_state.h"

#include <absl/strings/str_cat.h>

#include "base/paths.h"
#include "base/sha256.h"

namespace stagehand::reconciler {

ActualTarget* ActualVolume::FindTarget(const std::string& path) {
  for (auto& t : targets) {
    if (t.target_path == path) {
      return &t;
    }
  }
  return nullptr;
}

const ActualTarget* ActualVolume::FindTarget(const std::string& path) const {
  return const_cast<ActualVolume*>(this)->FindTarget(path);
}

std::string StagingPathFor(const std::string& root, const std::string& driver,
                           const std::string& volume_handle) {
  return JoinPath(root, absl::StrCat("plugins/kubernetes.io/csi/", driver, "/",
                                     Sha256Hex(volume_handle), "/globalmount"));
}

}  // namespace stagehand::reconciler
