// NodeService::UpgradeSessions: session processes of an earlier build replaced in place.

#include <spdlog/spdlog.h>

#include "base/log.h"
#include "driver/node_service.h"

namespace stagehand::driver {
namespace {

constexpr LogComponent kComponent = LogComponent::kSessions;

}  // namespace

NodeService::UpgradeRound NodeService::UpgradeSessions(const std::stop_token& stop) {
  UpgradeRound round;
  std::vector<std::string> unreadable;
  const std::vector<StagedVolume> volumes = store_.List(&unreadable);
  // First, and without waiting for any volume's lock: a reservation the transport renews must
  // move again well within the takeover time.
  for (const StagedVolume& listed : volumes) {
    if (listed.phase != StagedVolume::Phase::kStaged) {
      continue;
    }
    if (absl::Status resumed = deps_.transport.Resume(listed.session); !resumed.ok()) {
      Log(kComponent).warn("resume volume='{}': {}", listed.volume_id, resumed);
    }
  }
  for (const StagedVolume& listed : volumes) {
    if (stop.stop_requested()) {
      break;
    }
    if (listed.phase != StagedVolume::Phase::kStaged) {
      continue;
    }
    VolumeLocks::Guard guard(locks_, listed.volume_id);
    if (!guard.held()) {
      round.waiting += deps_.transport.Describe(listed.session).outdated ? 1 : 0;
      continue;  // A call for it is in progress.
    }
    // Read again under the lock: the call that held it may have changed or removed it.
    auto loaded = store_.Load(listed.volume_id);
    if (!loaded.ok() || !loaded->has_value() || (*loaded)->phase != StagedVolume::Phase::kStaged) {
      continue;
    }
    StagedVolume volume = **loaded;
    const transport::SessionDescription before = deps_.transport.Describe(volume.session);
    auto next = deps_.transport.Upgrade(volume.session);
    if (!next.ok() && absl::IsUnavailable(next.status())) {
      ++round.waiting;
      Log(kComponent).info("upgrade volume='{}': later: {}", volume.volume_id, next.status());
      continue;
    }
    if (!next.ok()) {
      Log(kComponent)
          .warn("upgrade volume='{}': session process {} (build {}) serves on: {}",
                volume.volume_id, before.pid, before.build, next.status());
      continue;
    }
    if (!next->has_value()) {
      continue;
    }
    volume.session = **next;
    if (auto saved = store_.Save(volume); !saved.ok()) {
      // The new process serves; its status file names it, which is what health and unstage
      // read first.
      Log(kComponent)
          .warn("upgrade volume='{}': the new session record was not saved: {}", volume.volume_id,
                saved);
    }
    ++round.replaced;
    const transport::SessionDescription after = deps_.transport.Describe(volume.session);
    Log(kComponent)
        .info("upgrade volume='{}': session process {} (build {}) replaced by {} (build {})",
              volume.volume_id, before.pid, before.build.substr(0, 12), after.pid,
              after.build.substr(0, 12));
  }
  return round;
}

}  // namespace stagehand::driver
