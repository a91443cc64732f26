#include "session/reconnector.h"

#include <algorithm>
#include <string>
#include <utility>

#include <absl/strings/str_cat.h>

#include "base/backoff.h"
#include "iscsi/reservation_claim.h"

namespace stagehand::session {
namespace {

// Re-logins back off from 250 ms to 5 s, without jitter: one session per volume, so there is no
// herd to spread.
constexpr BackoffPolicy kLoginBackoff{.initial = std::chrono::milliseconds(250),
                                      .max = std::chrono::milliseconds(5000),
                                      .multiplier = 2.0,
                                      .jitter = 0.0};
constexpr auto kFlappingWithin = std::chrono::seconds(2);

}  // namespace

int NextLoginBackoffMs(int backoff_ms) {
  return static_cast<int>(
      NextBaseDelay(kLoginBackoff, std::chrono::milliseconds(backoff_ms)).count());
}

int FlapBackoffMs(int previous_ms, std::chrono::steady_clock::duration since_last_reconnect) {
  if (since_last_reconnect >= kFlappingWithin) {
    return 0;
  }
  return static_cast<int>(
      NextBaseDelay(kLoginBackoff, std::chrono::milliseconds(previous_ms)).count());
}

Reconnector::Reconnector(ReconnectorOptions options, CommandQueue& queue, StatusBoard& board)
    : options_(std::move(options)), queue_(queue), board_(board), lost_since_(options_.lost_since) {
  for (size_t i = 0; i < options_.portals.size(); ++i) {
    if (options_.portals[i] == options_.login.portal) {
      portal_index_ = i;
    }
  }
}

void Reconnector::ExpireIfDue() {
  if (queue_.Expired() || !lost_since_ ||
      std::chrono::steady_clock::now() - *lost_since_ < options_.replacement_timeout) {
    return;
  }
  // The status first: whoever sees an I/O fail must find the reason in the status already.
  board_.status.io_failing = true;
  board_.Publish(
      ServerState::kReconnecting,
      absl::StrCat("no connection to the target for ", options_.replacement_timeout.count(),
                   " s (replacement timeout): I/O fails with EIO until it is back; ",
                   board_.status.message));
  queue_.Expire();
}

bool Reconnector::WaitFor(std::chrono::milliseconds ms, const Wait& wait) {
  const auto now = std::chrono::steady_clock::now();
  const auto until = now + ms;
  while (true) {
    ExpireIfDue();
    const auto at = std::chrono::steady_clock::now();
    if (at >= until) {
      return true;
    }
    auto left = until - at;
    if (!queue_.Expired() && lost_since_) {
      // Wake when the replacement timeout is due, not only at the end of the backoff.
      left = std::min(left, *lost_since_ + options_.replacement_timeout - at);
    }
    // Rounded up: a wait of 0 ms would spin until the deadline.
    const auto left_ms = std::chrono::ceil<std::chrono::milliseconds>(left);
    if (!wait(std::max(left_ms, std::chrono::milliseconds(1)), queue_.Expired())) {
      return false;
    }
  }
}

bool Reconnector::Reconnect(const Wait& wait) {
  // The replacement timeout counts from the first answer the target owed and never gave (a
  // frozen target is found silent a few seconds later), or from now.
  const auto silent_since = queue_.SilentSince();
  const std::string reason = queue_.Disconnect();
  if (!lost_since_) {
    lost_since_ = std::min(std::chrono::steady_clock::now(),
                           silent_since.value_or(std::chrono::steady_clock::time_point::max()));
  }
  board_.status.lost_since_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(lost_since_->time_since_epoch())
          .count());
  board_.Publish(ServerState::kReconnecting,
                 absl::StrCat("connection lost (", reason, "); logging in again"));
  // A connection that drops again right after a reconnect is flapping: back off before the
  // next login instead of spinning through logins and retries.
  flap_backoff_ms_ =
      FlapBackoffMs(flap_backoff_ms_, std::chrono::steady_clock::now() - last_reconnect_);
  if (flap_backoff_ms_ > 0 && !WaitFor(std::chrono::milliseconds(flap_backoff_ms_), wait)) {
    return false;
  }
  int backoff_ms = static_cast<int>(kLoginBackoff.initial.count());
  size_t attempt = 0;
  while (true) {
    iscsi::LoginParams params = options_.login;
    if (!options_.portals.empty()) {
      params.portal = options_.portals[(portal_index_ + attempt) % options_.portals.size()];
    }
    ++attempt;
    // A login to a target that accepts the connection but answers nothing (frozen) waits up to
    // its step timeout: the replacement timeout still expires on time meanwhile, and once it
    // has, FUSE requests are answered (EIO) instead of waiting for the login.
    bool stopping = false;
    params.keepalive = [this, &wait, &stopping, alive = options_.login.keepalive] {
      if (alive) {
        alive();
      }
      ExpireIfDue();
      if (queue_.Expired() && !stopping && !wait(std::chrono::milliseconds(0), true)) {
        stopping = true;  // Seen again by the next WaitFor (the stop stays readable).
      }
    };
    auto conn = iscsi::Connection::Login(params);
    std::string why;
    if (conn.ok()) {
      switch (Accept(std::move(*conn), params, attempt, &why)) {
        case Outcome::kServing:
        case Outcome::kFailedClosed:
          return true;
        case Outcome::kRetry:
          break;
      }
    } else {
      why = std::string(conn.status().message());
    }
    board_.Publish(
        ServerState::kReconnecting,
        absl::StrCat(queue_.Expired() ? "I/O fails with EIO (replacement timeout); " : "",
                     "reconnect failed: ", why));
    if (!WaitFor(std::chrono::milliseconds(backoff_ms), wait)) {
      return false;
    }
    backoff_ms = NextLoginBackoffMs(backoff_ms);
  }
}

Reconnector::Outcome Reconnector::Accept(std::unique_ptr<iscsi::Connection> conn,
                                         const iscsi::LoginParams& params, size_t attempt,
                                         std::string* why) {
  auto identity = conn->ReadIdentity();
  if (!identity.ok()) {
    *why = "cannot read LUN identity";
    return Outcome::kRetry;
  }
  if (auto same = iscsi::CheckSameLun(options_.identity, *identity); !same.ok()) {
    // The status first, as for the replacement timeout.
    board_.Publish(ServerState::kIdentityMismatch, std::string(same.message()));
    queue_.FailClosed();
    return Outcome::kFailedClosed;
  }
  if (auto cap = conn->ReadCapacity();
      cap.ok() && options_.on_capacity && !options_.on_capacity(*cap)) {
    return Outcome::kFailedClosed;  // A smaller LUN: failed closed, as for another LUN.
  }
  if (options_.reservation_key != 0) {
    // A new nexus: registered and holding before any I/O resumes on it.
    auto claimed = iscsi::ClaimReservation(*conn, options_.reservation_key,
                                           board_.status.reservation_generation);
    if (!claimed.ok() && (claimed.status().code() == absl::StatusCode::kPermissionDenied ||
                          claimed.status().code() == absl::StatusCode::kFailedPrecondition)) {
      board_.Publish(ServerState::kFenced, std::string(claimed.status().message()));
      queue_.FailClosed();
      return Outcome::kFailedClosed;
    }
    if (!claimed.ok()) {
      *why = absl::StrCat("cannot claim the LUN's reservation: ", claimed.status().message());
      return Outcome::kRetry;
    }
    board_.status.reservation_generation = claimed->generation;
    board_.status.reservation_key = claimed->key;
  }
  options_.login.portal = params.portal;
  portal_index_ = (portal_index_ + attempt - 1) % std::max<size_t>(options_.portals.size(), 1);
  queue_.Connect(conn->ReleaseContext());
  queue_.SetReservationKey(board_.status.reservation_key);
  last_reconnect_ = std::chrono::steady_clock::now();
  lost_since_.reset();
  board_.status.lost_since_ns = 0;
  board_.status.portal = params.portal.ToString();
  ++board_.status.reconnects;
  board_.Publish(ServerState::kUp, "reconnected");
  queue_.ResubmitParked();
  return Outcome::kServing;
}

}  // namespace stagehand::session
