#pragma once

// The login side of a FuseLunServer: when the CommandQueue asks for a new connection, logs in
// again (rotating through the portals, backing off), re-reads the LUN identity and hands the
// queue the connection only if it is the same LUN; another LUN fails closed. It also keeps the
// replacement timeout: once the connection has been gone that long, I/O fails with EIO while
// the logins go on. Single-threaded: the server's thread.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "iscsi/libiscsi_connection.h"
#include "iscsi/lun_capacity.h"
#include "iscsi/lun_identity.h"
#include "iscsi/target_spec.h"
#include "session/command_queue.h"
#include "session/server_status.h"

namespace stagehand::session {

// The wait before the next login after one that failed: doubling from 250 ms, at most 5 s.
int NextLoginBackoffMs(int backoff_ms);
// The wait before the first login: none, unless the connection dropped again within 2 s of the
// last reconnect (flapping): then 250 ms, doubling while it keeps flapping, at most 5 s.
int FlapBackoffMs(int previous_ms, std::chrono::steady_clock::duration since_last_reconnect);

struct ReconnectorOptions {
  std::vector<iscsi::Portal> portals;  // Tried in turn, starting with the current one.
  iscsi::LoginParams login;            // iscsi::Portal of the current connection.
  iscsi::LunIdentity identity;         // What the LUN must keep reporting.
  std::chrono::seconds replacement_timeout{120};
  // The capacity read at each login; false refuses it (the server failed closed: stop here).
  std::function<bool(const iscsi::LunCapacity&)> on_capacity;
  // When the connection was lost, if before this process (a successor of one that died while
  // reconnecting): the replacement timeout runs from then, not from the successor's start.
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  // Non-zero: every new login claims the LUN's reservation under this key again before I/O
  // resumes on it (iscsi/reservation_claim.h), from the generation on the board; a claim that
  // finds another node holding it fails closed (fenced).
  uint64_t reservation_key = 0;
};

class Reconnector {
 public:
  // What became of a login.
  enum class Outcome { kServing, kFailedClosed, kRetry };

  // Waits up to the duration for a stop; while `serve_fuse`, answers FUSE requests meanwhile.
  // False when stopping or unmounted.
  using Wait = std::function<bool(std::chrono::milliseconds, bool serve_fuse)>;

  // Publishes on `board` (its portal and reconnect count included).
  Reconnector(ReconnectorOptions options, CommandQueue& queue, StatusBoard& board);

  // Drops the queue's connection and logs in until it works, the LUN turns out to be another
  // one (the queue fails closed), or `wait` reports a stop. False when stopping.
  bool Reconnect(const Wait& wait);

 private:
  // Publishes the replacement timeout and expires the queue once it is due.
  void ExpireIfDue();
  // Waits `ms`, expiring the queue when due; false when stopping.
  bool WaitFor(std::chrono::milliseconds ms, const Wait& wait);
  // Checks the LUN of a new login, claims its reservation and hands it to the queue; `why`
  // says what failed when it is kRetry.
  Outcome Accept(std::unique_ptr<iscsi::Connection> conn, const iscsi::LoginParams& params,
                 size_t attempt, std::string* why);

  ReconnectorOptions options_;
  CommandQueue& queue_;
  StatusBoard& board_;
  size_t portal_index_ = 0;
  std::chrono::steady_clock::time_point last_reconnect_;
  int flap_backoff_ms_ = 0;
  // Since when there is no usable connection (set when a reconnect starts, cleared on login).
  std::optional<std::chrono::steady_clock::time_point> lost_since_;
};

}  // namespace stagehand::session
