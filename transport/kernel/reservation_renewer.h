#pragma once

// The kernel transport's half of "one writer per LUN": claiming a single-node volume's LUN on
// every path (I_T nexus) of its attachment, and, while it stays staged, moving each path's
// registration to a fresh key every renewal period, which is how a waiting node sees that this
// one is alive (iscsi/reservation_claim.h). The userspace transport does this in its session
// process; the kernel's sessions have no process of ours, so the agent does it here, from a
// thread of its own that exists while a volume is held.
//
// Each volume's keys live in a file (state::v1::KernelReservation, the path in its session
// record) rewritten before and after every renewal, so that an agent that restarts knows which
// key is each path's and carries on (KernelTransport::Resume) - never by registering anew: a
// registration that is gone was taken by another node (fenced), and the holder never takes it
// back on its own. Except when the target forgot every registration (tgt across its restart):
// then the LUN is claimed again, as a reconnect of the userspace transport does.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "iscsi/persistent_reservation.h"
#include "iscsi/reservation_claim.h"
#include "proto/state.pb.h"

namespace stagehand::transport::kernel {

// Opens the reservation commands on a path's disk ("sdb").
using OpenReservations =
    std::function<absl::StatusOr<std::unique_ptr<iscsi::ReservationChannel>>(const std::string&)>;

// Claims the LUN behind `disks` (the paths of one attachment, the first claims and the others
// join) for the node of `node_key`, preempting `takeover_key` if it still holds it
// (iscsi::ClaimReservation). Errors as iscsi::StageRefusal makes them (Unavailable while another
// node holds it; `takeover_node_keys` as ClaimReservation takes it), except Unimplemented: the
// target has no persistent reservations. On failure no path stays registered. `took_over_from`: the
// preempted holder's key, or 0.
absl::StatusOr<state::v1::KernelReservation> ClaimPaths(const OpenReservations& open,
                                                        const std::vector<std::string>& disks,
                                                        uint64_t node_key, uint64_t takeover_key,
                                                        uint64_t takeover_node_keys,
                                                        uint64_t* took_over_from);

// Gives the LUN up through the first path that answers: releases the reservation and removes
// every registration of the node (iscsi::ReleaseReservation). OK when no key of the node is
// left (never held, or fenced).
absl::Status ReleasePaths(const OpenReservations& open,
                          const state::v1::KernelReservation& reservation);

class ReservationRenewer {
 public:
  // What the renewer knows of a held volume, for health and descriptions.
  struct State {
    uint64_t key = 0;  // The first path's key now.
    bool fenced = false;
    std::optional<uint64_t> holder;  // Fenced: the holder the target named, where it did.
    std::string message;             // Fenced: what happened, for a person.
  };

  // `background`: renew from a thread of its own (false in unit tests, which call RenewDue).
  explicit ReservationRenewer(OpenReservations open, bool background = true);
  ReservationRenewer(const ReservationRenewer&) = delete;
  ReservationRenewer& operator=(const ReservationRenewer&) = delete;
  ~ReservationRenewer();

  // Renews `reservation` from now on, kept in `file` (written here first).
  absl::Status Hold(const std::string& file, state::v1::KernelReservation reservation)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Takes up the volume whose keys `file` keeps, after an agent restart: a renewal cut short
  // is settled by READ KEYS. OK (nothing) when the file is gone, or this process has held or
  // dropped it already.
  absl::Status Resume(const std::string& file) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops renewing the volume of `file` (waits for a renewal of it in flight) and returns what
  // the file says; nullopt when it was not held. The file stays (the caller releases, then
  // removes it).
  std::optional<state::v1::KernelReservation> Drop(const std::string& file)
      ABSL_LOCKS_EXCLUDED(mu_);

  // nullopt when the volume of `file` is not held here.
  std::optional<State> Get(const std::string& file) const ABSL_LOCKS_EXCLUDED(mu_);

  // Renews every volume due at `now` (the background thread's round).
  void RenewDue(std::chrono::steady_clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Held {
    state::v1::KernelReservation reservation;
    std::chrono::steady_clock::time_point due;
    bool busy = false;  // A renewal of it runs outside the lock.
    State state;
  };

  // One volume's renewal, outside the lock: each path's key moves to a fresh one. Returns the
  // new state of the reservation and whether it was fenced.
  void Renew(const std::string& file, state::v1::KernelReservation& reservation, State& state);
  void StartLocked(const std::string& file, state::v1::KernelReservation reservation,
                   std::chrono::steady_clock::time_point due) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(const std::stop_token& token) ABSL_LOCKS_EXCLUDED(mu_);

  const OpenReservations open_;
  const bool background_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
  // Every file a Hold, Drop or Resume saw: a Resume only takes up a volume nothing in this
  // process has touched yet (never one an unstage or a re-stage has just dropped).
  std::set<std::string> touched_ ABSL_GUARDED_BY(mu_);
  std::jthread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand::transport::kernel
