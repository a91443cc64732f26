#include "driver/takeover_watch.h"

namespace stagehand::driver {

uint64_t TakeoverWatch::KeyToTakeOver(const std::string& volume_id, std::chrono::seconds after,
                                      uint64_t* node_keys) const {
  MutexLock lock(mu_);
  auto it = seen_.find(volume_id);
  if (it == seen_.end() || clock_.Now() - it->second.since < after) {
    return 0;
  }
  if (node_keys != nullptr) {
    *node_keys = it->second.node_keys;
  }
  return it->second.key;
}

void TakeoverWatch::Refused(const std::string& volume_id, uint64_t key, uint64_t node_keys) {
  MutexLock lock(mu_);
  ++Tally(volume_id).refusals;
  const Seen now{.key = key, .node_keys = node_keys, .since = clock_.Now()};
  auto [it, added] = seen_.try_emplace(volume_id, now);
  if (!added && (it->second.key != key || it->second.node_keys != node_keys)) {
    it->second = now;
  }
}

void TakeoverWatch::Forget(const std::string& volume_id) {
  MutexLock lock(mu_);
  seen_.erase(volume_id);
}

void TakeoverWatch::TookOver(const std::string& volume_id) {
  MutexLock lock(mu_);
  ++Tally(volume_id).takeovers;
}

std::vector<ReservationTally> TakeoverWatch::Tallies() const {
  MutexLock lock(mu_);
  std::vector<ReservationTally> out;
  out.reserve(tallies_.size());
  for (const auto& [id, tally] : tallies_) {
    out.push_back(tally);
  }
  return out;
}

ReservationTally& TakeoverWatch::Tally(const std::string& volume_id) {
  ReservationTally& tally = tallies_[volume_id];
  tally.volume_id = volume_id;
  return tally;
}

}  // namespace stagehand::driver
