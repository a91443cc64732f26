#pragma once

// The iSCSI side of a FuseLunServer: its one connection, the commands in flight on it, the
// requests waiting for a connection or for the next tick, and the checks that find a connection
// that must be replaced (NOPs unanswered, a command without an answer, a LUN that answers with
// another identity). It never logs in itself: it asks for a reconnect (ReconnectRequested) and
// the Reconnector hands it the next connection. Single-threaded: the server's thread.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "iscsi/iscsi_handles.h"
#include "iscsi/lun_capacity.h"
#include "iscsi/lun_identity.h"
#include "session/counters_file.h"
#include "session/io_request.h"

namespace stagehand::session {

struct CommandQueueOptions {
  uint32_t lun = 0;
  uint32_t block_size = 512;
  iscsi::LunIdentity identity;  // What the LUN must keep reporting.
  std::chrono::seconds replacement_timeout{120};
  DataPathCounters* counters = nullptr;  // May be null.
  // A READ CAPACITY answered (by RefreshCapacity) with this capacity.
  std::function<void(const iscsi::LunCapacity&)> on_capacity;
  // A capacity refresh is over (whether or not it could read anything).
  std::function<void()> on_capacity_refreshed;
  // With a reservation key (SetReservationKey): how often the registration moves to a fresh
  // key of the node (PERSISTENT RESERVE OUT, REGISTER), which shows through the target that
  // this node is alive; 0: never. on_renewed gets each new key.
  std::chrono::seconds renew_every{0};
  std::function<void(uint64_t)> on_renewed;
  // The target answered RESERVATION CONFLICT while this queue held a registration (a command,
  // or a renewal: the registration is gone): the queue failed closed (another node holds the
  // LUN). Called once. Without a registration (a reader) only the refused write fails.
  std::function<void()> on_fenced;
};

class CommandQueue {
 public:
  // Serves on `ctx` (logged in, identity checked; null: none yet, requests wait). Command
  // timeouts are turned off on it.
  CommandQueue(CommandQueueOptions options, iscsi::IscsiContext ctx);
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;
  // Logs out. Commands that complete meanwhile are dropped, and so are waiting requests: the
  // FUSE session is gone by then.
  ~CommandQueue();

  // Sends `r`, or parks it until the next connection, or fails it with EIO (failed closed, or
  // no connection for longer than the replacement timeout).
  void Submit(std::unique_ptr<IoRequest> r);

  // The connection's socket for poll(2); only while HasConnection().
  bool HasConnection() const { return ctx_ != nullptr; }

  int Fd() const;
  short Events() const;
  // Runs libiscsi on the socket's `revents`.
  void Service(short revents);

  // Once a second: retries what waits for a tick, and on a live connection runs the timers,
  // the identity check and the NOP-Outs. A target that answers nothing (no NOP-In, no command
  // completion) for kSilenceLimit (at most the replacement timeout) while it owes an answer is
  // taken for gone (a frozen target keeps its TCP connection open): the connection is replaced.
  void OnTick();

  // Since when the target has owed an answer without giving any: the later of the oldest
  // command or NOP-Out still unanswered and the last answer of any kind; nullopt when nothing
  // is owed (or there is no connection).
  std::optional<std::chrono::steady_clock::time_point> SilentSince() const;

  // READ CAPACITY(16) on the live connection; on_capacity_refreshed either way.
  void RefreshCapacity();

  // The first reason wins until Disconnect().
  void RequestReconnect(std::string why);

  bool ReconnectRequested() const { return need_reconnect_ && !failed_closed_; }

  // Drops the connection: its commands are cancelled and park. Returns why it was asked for.
  std::string Disconnect();
  // Serves on a new connection (logged in, identity checked): the expiry is over. Call
  // ResubmitParked() next, once the status says so.
  void Connect(iscsi::IscsiContext ctx);
  // Sends what waited for a connection, except what waited longer than the replacement timeout
  // over connections that kept dropping (EIO).
  void ResubmitParked();

  // No connection for longer than the replacement timeout: what waits fails with EIO, and so
  // does every new request until Connect().
  void Expire();

  bool Expired() const { return expired_; }

  // The LUN is another one, or another node's now: what waits fails with EIO, and so does
  // everything from now on.
  void FailClosed();

  bool FailedClosed() const { return failed_closed_; }

  // Stopping: answers (EIO) whatever waits, so that the kernel is not left waiting.
  void FailWaiting();

  // The key this connection's nexus is registered under (a claim's, after a login); 0: none.
  void SetReservationKey(uint64_t key);

  // Nothing in flight on the connection, nothing waiting for one or for a tick.
  bool Idle() const { return sent_.empty() && parked_.empty() && retry_on_tick_.empty(); }

 private:
  static void OnTaskDone(iscsi_context* ctx, int status, void* command_data, void* private_data);
  static void OnIdentityPage(iscsi_context* ctx, int status, void* command_data,
                             void* private_data);
  static void OnCapacity(iscsi_context* ctx, int status, void* command_data, void* private_data);
  static void OnNopIn(iscsi_context* ctx, int status, void* command_data, void* private_data);
  static void OnRenewed(iscsi_context* ctx, int status, void* command_data, void* private_data);
  // Moves the registration to a fresh key when a renewal is due.
  void RenewIfDue(std::chrono::steady_clock::time_point now);
  // Fails closed and tells on_fenced, once.
  void Fence();
  // An answer came from the target (not a cancellation).
  void Heard(int status);

  void Park(std::unique_ptr<IoRequest> r);
  void CheckIdentity();
  void RecheckIdentityAfter(const scsi_task& task);
  void DestroyContext();

  CommandQueueOptions options_;
  iscsi::IscsiContext ctx_;  // Null while reconnecting.
  bool need_reconnect_ = false;
  std::string reconnect_reason_;
  bool failed_closed_ = false;
  bool expired_ = false;
  bool stopping_ = false;  // Being destroyed: completions are dropped.
  int ticks_ = 0;
  std::unordered_set<IoRequest*> sent_;  // In flight on the connection (owned by their tasks).
  int identity_checks_in_flight_ = 0;    // VPD reads of the periodic identity check.
  // When the identity check and the NOP-Out in flight were sent (unset: none in flight), and
  // when the target last answered anything.
  std::optional<std::chrono::steady_clock::time_point> identity_sent_at_;
  std::optional<std::chrono::steady_clock::time_point> nop_sent_at_;
  std::chrono::steady_clock::time_point last_heard_;
  std::deque<std::unique_ptr<IoRequest>> parked_;         // Waiting for a connection.
  std::deque<std::unique_ptr<IoRequest>> retry_on_tick_;  // Waiting for the next tick.
  uint64_t reservation_key_ = 0;                          // The registration now; 0: none.
  uint64_t renewing_to_ = 0;  // The key a renewal in flight moves to; 0: none.
  std::chrono::steady_clock::time_point renewed_at_;  // Of the key, on this connection.
};

}  // namespace stagehand::session
