#include "transport/kernel/reservation_renewer.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/log.h"

namespace stagehand::transport::kernel {
namespace {

constexpr LogComponent kComponent = LogComponent::kSessions;

absl::Status Persist(const std::string& file, const state::v1::KernelReservation& reservation) {
  return WithContext(WriteFileAtomically(file, reservation.SerializeAsString(), 0600),
                     absl::StrCat("write the reservation keys ", file));
}

bool Listed(const iscsi::Reservations& r, uint64_t key) {
  return std::find(r.keys.begin(), r.keys.end(), key) != r.keys.end();
}

std::vector<std::string> Disks(const state::v1::KernelReservation& reservation) {
  std::vector<std::string> disks;
  for (const auto& p : reservation.paths()) {
    disks.push_back(p.disk());
  }
  return disks;
}

// Settles a renewal whose outcome is not known (the agent stopped between the two writes of
// the file, or the REGISTER's answer was lost): the key READ KEYS lists is the path's. False
// while it cannot tell.
bool Settle(iscsi::ReservationChannel& channel, state::v1::KernelReservation::Path& path) {
  if (path.next() == 0) {
    return true;
  }
  auto r = channel.ReadReservations();
  if (!r.ok()) {
    return false;
  }
  if (Listed(*r, path.next())) {
    path.set_key(path.next());
  }
  path.set_next(0);
  return true;
}

}  // namespace

absl::StatusOr<state::v1::KernelReservation> ClaimPaths(const OpenReservations& open,
                                                        const std::vector<std::string>& disks,
                                                        uint64_t node_key, uint64_t takeover_key,
                                                        uint64_t takeover_node_keys,
                                                        uint64_t* took_over_from) {
  if (disks.empty()) {
    return absl::InvalidArgumentError("no path to claim the LUN on");
  }
  SH_ASSIGN_OR_RETURN(std::unique_ptr<iscsi::ReservationChannel> first, open(disks.front()));
  auto claimed =
      iscsi::ClaimReservation(*first, node_key, std::nullopt, takeover_key, takeover_node_keys);
  if (!claimed.ok()) {
    return absl::IsUnimplemented(claimed.status()) ? claimed.status()
                                                   : iscsi::StageRefusal(claimed.status());
  }
  state::v1::KernelReservation out;
  auto* held = out.add_paths();
  held->set_disk(disks.front());
  held->set_key(claimed->key);
  out.set_generation(claimed->generation);
  if (took_over_from != nullptr) {
    *took_over_from = claimed->took_over_from;
  }
  // Under Write Exclusive - Registrants Only every registrant may write: each other path joins
  // with a key of its own, before anything writes through it.
  for (size_t i = 1; i < disks.size(); ++i) {
    absl::StatusOr<uint64_t> joined = absl::UnavailableError("not tried");
    if (auto channel = open(disks[i]); channel.ok()) {
      joined = iscsi::JoinReservation(**channel, node_key);
    } else {
      joined = channel.status();
    }
    if (!joined.ok()) {
      if (auto released = ReleasePaths(open, out); !released.ok()) {
        Log(kComponent).warn("cannot release the LUN after a path failed to join: {}", released);
      }
      return absl::Status(joined.status().code(),
                          absl::StrCat("cannot register path ", disks[i],
                                       " of the LUN for this node: ", joined.status().message()));
    }
    auto* path = out.add_paths();
    path->set_disk(disks[i]);
    path->set_key(*joined);
  }
  return out;
}

absl::Status ReleasePaths(const OpenReservations& open,
                          const state::v1::KernelReservation& reservation) {
  if (reservation.paths().empty()) {
    return absl::OkStatus();
  }
  absl::Status last = absl::UnavailableError("no path of the LUN answers");
  for (const auto& path : reservation.paths()) {
    auto channel = open(path.disk());
    if (!channel.ok()) {
      last = channel.status();
      continue;
    }
    last = iscsi::ReleaseReservation(**channel, reservation.paths(0).key());
    if (last.ok() || !absl::IsUnavailable(last)) {
      return last;
    }
  }
  return last;
}

ReservationRenewer::ReservationRenewer(OpenReservations open, bool background)
    : open_(std::move(open)), background_(background) {}

ReservationRenewer::~ReservationRenewer() {
  std::jthread thread;
  {
    MutexLock lock(mu_);
    thread = std::move(thread_);
  }
  if (thread.joinable()) {
    thread.request_stop();
    cv_.notify_all();
    thread.join();
  }
}

absl::Status ReservationRenewer::Hold(const std::string& file,
                                      state::v1::KernelReservation reservation) {
  SH_RETURN_IF_ERROR(Persist(file, reservation));
  MutexLock lock(mu_);
  touched_.insert(file);
  cv_.wait(mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = held_.find(file);
    return it == held_.end() || !it->second.busy;
  });
  const auto due =
      std::chrono::steady_clock::now() + std::chrono::seconds(reservation.renew_seconds());
  StartLocked(file, std::move(reservation), due);
  return absl::OkStatus();
}

absl::Status ReservationRenewer::Resume(const std::string& file) {
  {
    MutexLock lock(mu_);
    if (touched_.contains(file)) {
      return absl::OkStatus();
    }
  }
  auto text = ReadFileToString(file);
  if (!text.ok()) {
    return absl::IsNotFound(text.status()) ? absl::OkStatus() : text.status();
  }
  state::v1::KernelReservation reservation;
  if (!reservation.ParseFromString(*text)) {
    return absl::DataLossError(absl::StrCat("cannot read the reservation keys in ", file));
  }
  MutexLock lock(mu_);
  if (touched_.insert(file).second) {
    // Renewed at once: the restart took some of its time.
    StartLocked(file, std::move(reservation), std::chrono::steady_clock::now());
  }
  return absl::OkStatus();
}

void ReservationRenewer::StartLocked(const std::string& file,
                                     state::v1::KernelReservation reservation,
                                     std::chrono::steady_clock::time_point due) {
  Held& h = held_[file];
  h.due = due;
  h.state = State{};
  h.state.key = reservation.paths().empty() ? 0 : reservation.paths(0).key();
  h.reservation = std::move(reservation);
  if (background_ && !thread_.joinable()) {
    thread_ = std::jthread([this](const std::stop_token& token) { Run(token); });
  }
}

std::optional<state::v1::KernelReservation> ReservationRenewer::Drop(const std::string& file) {
  MutexLock lock(mu_);
  touched_.insert(file);
  cv_.wait(mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = held_.find(file);
    return it == held_.end() || !it->second.busy;
  });
  auto it = held_.find(file);
  if (it == held_.end()) {
    return std::nullopt;
  }
  state::v1::KernelReservation out = std::move(it->second.reservation);
  held_.erase(it);
  return out;
}

std::optional<ReservationRenewer::State> ReservationRenewer::Get(const std::string& file) const {
  MutexLock lock(mu_);
  auto it = held_.find(file);
  if (it == held_.end()) {
    return std::nullopt;
  }
  return it->second.state;
}

void ReservationRenewer::RenewDue(std::chrono::steady_clock::time_point now) {
  std::vector<std::pair<std::string, Held>> due;
  {
    MutexLock lock(mu_);
    for (auto& [file, h] : held_) {
      if (!h.busy && !h.state.fenced && h.due <= now) {
        h.busy = true;
        due.emplace_back(file, h);
      }
    }
  }
  for (auto& [file, h] : due) {
    Renew(file, h.reservation, h.state);
  }
  MutexLock lock(mu_);
  for (auto& [file, h] : due) {
    Held& mine = held_[file];
    mine.reservation = std::move(h.reservation);
    mine.state = std::move(h.state);
    mine.busy = false;
    mine.due = std::chrono::steady_clock::now() +
               std::chrono::seconds(std::max(1u, mine.reservation.renew_seconds()));
  }
  cv_.notify_all();
}

void ReservationRenewer::Renew(const std::string& file, state::v1::KernelReservation& reservation,
                               State& state) {
  std::vector<uint64_t> taken;
  for (const auto& p : reservation.paths()) {
    taken.push_back(p.key());
  }
  for (auto& path : *reservation.mutable_paths()) {
    auto channel = open_(path.disk());
    if (!channel.ok()) {
      Log(kComponent)
          .debug("reservation {}: path {} skipped: {}", file, path.disk(), channel.status());
      continue;  // A path that is down keeps its key until it is back.
    }
    if (!Settle(**channel, path)) {
      continue;  // Its key is one of two; the next round asks again.
    }
    const uint64_t fresh = iscsi::FreshKey(path.key(), taken);
    path.set_next(fresh);
    if (auto saved = Persist(file, reservation); !saved.ok()) {
      Log(kComponent).warn("reservation {}: not renewed: {}", file, saved);
      path.set_next(0);
      return;
    }
    const absl::Status moved =
        (*channel)->ReserveOut(iscsi::ReserveAction::kRegister, path.key(), fresh, 0);
    if (moved.ok()) {
      path.set_key(fresh);
      path.set_next(0);
      taken.push_back(fresh);
      continue;
    }
    if (!absl::IsFailedPrecondition(moved)) {
      // No answer (the path went down, a timeout): the target may have moved the key or not;
      // `next` stays, and the next round settles it before anything else.
      Log(kComponent)
          .debug("reservation {}: path {} not renewed now: {}", file, path.disk(), moved);
      continue;
    }
    path.set_next(0);
    // RESERVATION CONFLICT: this nexus's key is gone. Another node preempted it (fenced), or
    // the target forgot every registration (a restart without persistence).
    auto now = (*channel)->ReadReservations();
    if (now.ok() && now->keys.empty() && !now->holder &&
        now->generation < reservation.generation()) {
      const std::vector<std::string> disks = Disks(reservation);
      auto again = ClaimPaths(open_, disks, path.key(), 0, 0, nullptr);
      if (again.ok()) {
        again->set_renew_seconds(reservation.renew_seconds());
        reservation = std::move(*again);
        Log(kComponent)
            .warn(
                "reservation {}: the target forgot its registrations (restarted?): claimed "
                "the LUN again",
                file);
        break;
      }
      if (iscsi::HolderKeyOf(again.status()) == 0) {
        // Not another node's reservation (a path not back yet): the next round tries again.
        Log(kComponent)
            .warn("reservation {}: cannot claim the LUN again yet: {}", file, again.status());
        return;
      }
      now = iscsi::Reservations{};  // Another node claimed it first.
      if (auto read = (*channel)->ReadReservations(); read.ok()) {
        now = *read;
      }
    }
    state.fenced = true;
    state.holder = now.ok() ? now->holder : std::nullopt;
    state.message =
        absl::StrCat("another node took this node's reservation of the LUN over (",
                     state.holder ? absl::StrCat("holder key ", iscsi::FormatKey(*state.holder))
                                  : std::string("no holder now"),
                     "): the target refuses this node's writes; unpublish and unstage the volume");
    Log(kComponent).error("reservation {}: fenced: {}", file, state.message);
    return;
  }
  state.key = reservation.paths().empty() ? 0 : reservation.paths(0).key();
  for (const auto& path : reservation.paths()) {
    if (auto channel = open_(path.disk()); channel.ok()) {
      if (auto r = (*channel)->ReadReservations(); r.ok()) {
        reservation.set_generation(r->generation);
        break;
      }
    }
  }
  if (auto saved = Persist(file, reservation); !saved.ok()) {
    Log(kComponent).warn("reservation {}: {}", file, saved);
  }
}

void ReservationRenewer::Run(const std::stop_token& token) {
  (void)pthread_setname_np(pthread_self(), "sh-reserve");
  while (!token.stop_requested()) {
    {
      MutexLock lock(mu_);
      cv_.wait_for(mu_, token, std::chrono::seconds(1), [] { return false; });
    }
    if (token.stop_requested()) {
      break;
    }
    RenewDue(std::chrono::steady_clock::now());
  }
}

}  // namespace stagehand::transport::kernel
