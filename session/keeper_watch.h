#pragma once

// A session process kept by the detached keeper (session/keeper.h) watches its keeper. The
// keeper holds the copy of the FUSE connection that lets a successor take over when the session
// dies; a keeper killed (kill -9, the OOM killer) would leave the session the only holder, and
// the session's next death would end the volume's I/O. The watch notices the death at once (a
// pidfd in the serving loop) and starts a keeper that adopts this running process, handed what
// a successor needs; notifications go to that keeper from then on. Under systemd (the unit's
// descriptor store lives in PID 1) or without a manager there is nothing to watch.

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand::session {

class KeeperWatch {
 public:
  KeeperWatch() = default;

  // The keeper named by $STAGEHAND_SESSION_KEEPER when it started this process (it is the
  // parent) and notifications go to it; inactive otherwise.
  static KeeperWatch FromEnvironment();

  // A pidfd that turns readable when the keeper dies; -1 when inactive.
  int Fd() const { return pidfd_.Get(); }

  // A keeper was expected but was gone before the watch began.
  bool LostAlready() const { return lost_already_; }

  // Starts a keeper that adopts this process, handed `handover` and `fuse` (session/protocol.h,
  // kAdoptArgument), waits until it listens, sends notifications there from now on and watches
  // it. Returns its pid.
  absl::StatusOr<int> Replace(UniqueFd handover, UniqueFd fuse);

 private:
  UniqueFd pidfd_;
  bool lost_already_ = false;
};

}  // namespace stagehand::session
