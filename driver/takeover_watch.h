#pragma once

// What a node waiting for a LUN that another node holds remembers between its stage attempts:
// the holder's key as each refused stage found it, and since when (on this node's monotonic
// clock). A live holder renews its registration under a new key several times within the
// takeover time; a key unchanged for the whole takeover time is a dead holder's, and the next
// stage preempts it. Nothing here depends on the holder's clock or cooperation: the target
// decides, and a preempted holder's writes fail there.
//
// It also counts, per volume and since the agent started, the stages that another node's
// reservation refused and those that took the LUN over from a dead holder (the metrics
// stagehand_reservation_refusals_total and stagehand_reservation_takeovers_total).

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/mutex.h"

namespace stagehand::driver {

// What the stages of one volume met on this node since the agent started.
struct ReservationTally {
  std::string volume_id;
  uint64_t refusals = 0;   // Stages refused: another node held the LUN.
  uint64_t takeovers = 0;  // Stages that preempted another node's dead reservation.
};

class TakeoverWatch {
 public:
  explicit TakeoverWatch(const Clock& clock) : clock_(clock) {}

  // The holder key the next stage of `volume_id` may preempt: the one earlier stages found,
  // unchanged for at least `after`; 0 when there is none (yet). `node_keys`: the digest of its
  // node's keys seen with it since, which the claim checks again (a stage may come long after
  // the last refusal: only the target can say nothing moved meanwhile).
  uint64_t KeyToTakeOver(const std::string& volume_id, std::chrono::seconds after,
                         uint64_t* node_keys = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);

  // A stage of `volume_id` found `key` holding its LUN, and `node_keys` (a digest of every key
  // of the holder's node; 0: unknown). A new key, or a new digest (another path of the holder
  // renewed), restarts the wait.
  void Refused(const std::string& volume_id, uint64_t key, uint64_t node_keys = 0)
      ABSL_LOCKS_EXCLUDED(mu_);

  // `volume_id` was staged, or the wait is over for another reason. The tally stays.
  void Forget(const std::string& volume_id) ABSL_LOCKS_EXCLUDED(mu_);

  // A stage of `volume_id` preempted another node's reservation of its LUN.
  void TookOver(const std::string& volume_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Every volume with anything counted, by volume id.
  std::vector<ReservationTally> Tallies() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Seen {
    uint64_t key = 0;
    uint64_t node_keys = 0;
    Clock::TimePoint since;
  };

  ReservationTally& Tally(const std::string& volume_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  mutable Mutex mu_;
  std::map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ReservationTally> tallies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand::driver
