#include "session/command_queue.h"

#include <algorithm>
#include <cerrno>
#include <span>
#include <utility>

#include <absl/strings/str_cat.h>

#include "iscsi/persistent_reservation.h"
#include "session/lun_io.h"

namespace stagehand::session {
namespace {

// A NOP-Out every tick while none is in flight; a target silent for this long while it owes
// an answer is gone (open-iscsi's noop_out_timeout is 5 s too).
constexpr auto kSilenceLimit = std::chrono::seconds(5);
// A LUN deleted and created again on the target (another disk under the same target and
// number) is not always announced on that LUN (tgtd raises its unit attention on the other LUNs
// of the nexus only): the identity is read again on the live connection this often.
constexpr int kIdentityCheckEveryTicks = 1;

// libiscsi's command timeout drops a timed-out PDU from its queues even when it is partly
// written to the socket, which corrupts the stream. Once serving, liveness comes from NOP-Outs
// (see OnTick) instead.
void DisableCommandTimeouts(iscsi_context* ctx) {
  (void)iscsi_set_timeout(ctx, 0);
}

}  // namespace

CommandQueue::CommandQueue(CommandQueueOptions options, iscsi::IscsiContext ctx)
    : options_(std::move(options)), ctx_(std::move(ctx)) {
  if (ctx_ != nullptr) {
    DisableCommandTimeouts(ctx_.get());
    last_heard_ = std::chrono::steady_clock::now();
  }
}

CommandQueue::~CommandQueue() {
  stopping_ = true;
  if (ctx_ != nullptr) {
    (void)iscsi_logout_sync(ctx_.get());
    DestroyContext();
  }
  // Waiting requests hand their buffers back to the pool: dropped here, while it still exists.
  parked_.clear();
  retry_on_tick_.clear();
}

// Destroying a context runs the callbacks of its commands with SCSI_STATUS_CANCELLED; they
// park themselves (see OnTaskDone), so `ctx_` is cleared first.
void CommandQueue::DestroyContext() {
  iscsi::IscsiContext old = std::exchange(ctx_, nullptr);
  old.reset();
}

int CommandQueue::Fd() const {
  return iscsi_get_fd(ctx_.get());
}

short CommandQueue::Events() const {
  return static_cast<short>(iscsi_which_events(ctx_.get()));
}

void CommandQueue::Service(short revents) {
  if (ctx_ != nullptr && iscsi_service(ctx_.get(), revents) < 0) {
    RequestReconnect(absl::StrCat("connection error: ", iscsi_get_error(ctx_.get())));
  }
}

void CommandQueue::Submit(std::unique_ptr<IoRequest> r) {
  if (failed_closed_) {
    r->Fail(EIO, options_.counters);
    return;
  }
  if (ctx_ == nullptr || need_reconnect_) {
    if (expired_) {
      r->Fail(EIO, options_.counters);  // The target has been gone too long: nothing may hang.
      return;
    }
    // No connection, or one about to be replaced (after a unit attention that may mean
    // another LUN, nothing more may be sent on it): wait for the next login.
    Park(std::move(r));
    return;
  }
  IoRequest* raw = r.get();
  raw->queue = this;
  scsi_task* task = nullptr;
  const int lun = static_cast<int>(options_.lun);
  const int block_size = static_cast<int>(options_.block_size);
  if (raw->flush) {
    task = iscsi_synchronizecache10_task(ctx_.get(), lun, 0, 0, 0, 0, &OnTaskDone, raw);
  } else if (raw->write) {
    task = iscsi_write16_task(ctx_.get(), lun, raw->lba, raw->Data(),
                              static_cast<uint32_t>(raw->slice_length), block_size, 0, 0, 0, 0, 0,
                              &OnTaskDone, raw);
  } else {
    const auto bytes = static_cast<uint32_t>(raw->blocks * options_.block_size);
    task = iscsi_read16_task(ctx_.get(), lun, raw->lba, bytes, block_size, 0, 0, 0, 0, 0,
                             &OnTaskDone, raw);
    if (task != nullptr) {
      // Nothing was received yet (this thread runs the socket): the data-in goes straight
      // into our buffer instead of libiscsi's reassembly buffer.
      raw->iov.iov_base = raw->Data();
      raw->iov.iov_len = bytes;
      scsi_task_set_iov_in(task, &raw->iov, 1);
    }
  }
  if (task == nullptr) {
    // Could not even queue it: the context is unusable. Park and reconnect.
    Park(std::move(r));
    RequestReconnect(absl::StrCat("cannot queue a command: ", iscsi_get_error(ctx_.get())));
    return;
  }
  raw->sent_at = std::chrono::steady_clock::now();
  sent_.insert(raw);
  (void)r.release();  // Owned by the task's private data until OnTaskDone.
}

void CommandQueue::OnTaskDone(iscsi_context* /*ctx*/, int status, void* command_data,
                              void* private_data) {
  iscsi::ScsiTask task(static_cast<scsi_task*>(command_data));
  std::unique_ptr<IoRequest> r(static_cast<IoRequest*>(private_data));
  CommandQueue* self = r->queue;
  self->sent_.erase(r.get());
  if (self->stopping_) {
    return;
  }
  self->Heard(status);
  if (status == SCSI_STATUS_GOOD) {
    r->Reply(*task, self->options_.counters);
    return;
  }
  const CompletionAction action = ClassifyCompletion(status, task.get(), r->retries);
  if (action != CompletionAction::kFail) {
    ++r->retries;
  }
  switch (action) {
    case CompletionAction::kRecheckIdentity:
      if (self->ctx_ != nullptr) {
        self->RecheckIdentityAfter(*task);
      }
      self->Park(std::move(r));
      return;
    case CompletionAction::kReconnect:
      // While the context is being destroyed (ctx_ is null then), its cancelled commands only
      // park: asking for another reconnect here would replace the new connection right after
      // the login, again on every login.
      if (self->ctx_ != nullptr) {
        self->RequestReconnect(status == SCSI_STATUS_TIMEOUT     ? "a command timed out"
                               : status == SCSI_STATUS_CANCELLED ? "a command was cancelled"
                                                                 : "a command failed");
      }
      self->Park(std::move(r));
      return;
    case CompletionAction::kRetryNow:
      self->Submit(std::move(r));
      return;
    case CompletionAction::kRetryOnTick:
      self->retry_on_tick_.push_back(std::move(r));
      return;
    case CompletionAction::kFail:
      r->Fail(EIO, self->options_.counters);
      return;
    case CompletionAction::kFenced:
      r->Fail(EIO, self->options_.counters);
      // Only a holder is fenced. A session without a registration (a reader of a multi-node
      // single-writer volume) may read on: the target refused this write and nothing else.
      if (self->reservation_key_ != 0) {
        self->Fence();
      }
      return;
  }
}

void CommandQueue::Park(std::unique_ptr<IoRequest> r) {
  if (r->parked_at == std::chrono::steady_clock::time_point{}) {
    r->parked_at = std::chrono::steady_clock::now();
  }
  parked_.push_back(std::move(r));
}

void CommandQueue::ResubmitParked() {
  std::deque<std::unique_ptr<IoRequest>> todo;
  todo.swap(parked_);
  const auto now = std::chrono::steady_clock::now();
  for (auto& r : todo) {
    if (now - r->parked_at >= options_.replacement_timeout) {
      r->Fail(EIO, options_.counters);  // Waited too long over connections that keep dropping.
      continue;
    }
    Submit(std::move(r));
  }
}

void CommandQueue::RefreshCapacity() {
  if (ctx_ == nullptr || failed_closed_ || need_reconnect_) {
    if (options_.on_capacity_refreshed) {
      options_.on_capacity_refreshed();  // Nothing to read now; a login re-reads it anyway.
    }
    return;
  }
  if (iscsi_readcapacity16_task(ctx_.get(), static_cast<int>(options_.lun), &OnCapacity, this) ==
      nullptr) {
    RequestReconnect(absl::StrCat("cannot queue READ CAPACITY: ", iscsi_get_error(ctx_.get())));
  }
}

void CommandQueue::OnCapacity(iscsi_context* /*ctx*/, int status, void* command_data,
                              void* private_data) {
  iscsi::ScsiTask task(static_cast<scsi_task*>(command_data));
  auto* self = static_cast<CommandQueue*>(private_data);
  if (self->stopping_) {
    return;
  }
  self->Heard(status);
  if (status == SCSI_STATUS_GOOD) {
    if (auto* rc = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task.get()));
        rc != nullptr && self->options_.on_capacity) {
      self->options_.on_capacity({rc->returned_lba + 1, rc->block_length});
    }
  } else if (task && IsUnitAttention(*task)) {
    // A unit attention is reported once, and this command took it: "capacity changed" (what an
    // expansion raises) is asked again; one that may mean another LUN gets the identity checked
    // by a new login (which reads the capacity too).
    if (task->sense.ascq == 0x2a09 || !iscsi::UnitAttentionMayChangeTheLun(task->sense.ascq)) {
      self->RefreshCapacity();
      return;
    }
    self->RecheckIdentityAfter(*task);
  }
  if (self->options_.on_capacity_refreshed) {
    self->options_.on_capacity_refreshed();
  }
}

// Reads VPD 0x83 and 0x80 on the live connection; a LUN that answers with another identity, or
// reports a unit attention that may mean another LUN, gets a new login (which reads the whole
// identity again and fails closed on another LUN) before more I/O is sent.
void CommandQueue::CheckIdentity() {
  const int lun = static_cast<int>(options_.lun);
  for (int page : {0x83, 0x80}) {
    if (iscsi_inquiry_task(ctx_.get(), lun, 1, page, 255, &OnIdentityPage, this) != nullptr) {
      ++identity_checks_in_flight_;
      identity_sent_at_ = std::chrono::steady_clock::now();
    }
  }
}

void CommandQueue::OnIdentityPage(iscsi_context* /*ctx*/, int status, void* command_data,
                                  void* private_data) {
  iscsi::ScsiTask task(static_cast<scsi_task*>(command_data));
  auto* self = static_cast<CommandQueue*>(private_data);
  if (--self->identity_checks_in_flight_ == 0) {
    self->identity_sent_at_.reset();
  }
  if (self->stopping_) {
    return;
  }
  self->Heard(status);
  if (self->failed_closed_ || !task) {
    return;
  }
  if (status != SCSI_STATUS_GOOD) {
    if (IsUnitAttention(*task) && iscsi::UnitAttentionMayChangeTheLun(task->sense.ascq)) {
      self->RecheckIdentityAfter(*task);
    }
    return;  // iscsi::Connection trouble shows on the I/O and the NOPs.
  }
  const std::span<const uint8_t> page(task->datain.data, static_cast<size_t>(task->datain.size));
  const iscsi::LunIdentity& known = self->options_.identity;
  bool changed = false;
  if (page.size() >= 2 && page[1] == 0x83) {
    auto designators = iscsi::ParseDeviceIdentificationPage(page);
    changed = designators.ok() && *designators != known.designators;
  } else if (page.size() >= 2 && page[1] == 0x80) {
    auto serial = iscsi::ParseUnitSerialPage(page);
    changed = serial.ok() && *serial != known.serial;
  }
  if (changed && self->ctx_ != nullptr) {
    self->RequestReconnect("the LUN answers with another identity; reading it again");
  }
}

// After a unit attention that may mean another LUN: a new login re-reads the identity before
// anything more is sent (and fails closed on another LUN).
void CommandQueue::RecheckIdentityAfter(const scsi_task& task) {
  RequestReconnect(absl::StrCat("the target reported a unit attention (",
                                scsi_sense_ascq_str(task.sense.ascq),
                                "); reading the LUN identity again"));
}

void CommandQueue::RequestReconnect(std::string why) {
  if (!need_reconnect_) {
    reconnect_reason_ = std::move(why);
  }
  need_reconnect_ = true;
}

std::string CommandQueue::Disconnect() {
  DestroyContext();
  need_reconnect_ = false;
  return std::exchange(reconnect_reason_, {});
}

void CommandQueue::Connect(iscsi::IscsiContext ctx) {
  ctx_ = std::move(ctx);
  DisableCommandTimeouts(ctx_.get());
  expired_ = false;
  last_heard_ = std::chrono::steady_clock::now();  // It just answered the login.
  // What was in flight on the old connection was cancelled with it.
  nop_sent_at_.reset();
  identity_sent_at_.reset();
}

void CommandQueue::Heard(int status) {
  if (status != SCSI_STATUS_CANCELLED) {
    last_heard_ = std::chrono::steady_clock::now();
  }
}

void CommandQueue::OnNopIn(iscsi_context* /*ctx*/, int status, void* /*command_data*/,
                           void* private_data) {
  auto* self = static_cast<CommandQueue*>(private_data);
  self->nop_sent_at_.reset();
  if (!self->stopping_) {
    self->Heard(status);
  }
}

std::optional<std::chrono::steady_clock::time_point> CommandQueue::SilentSince() const {
  if (ctx_ == nullptr) {
    return std::nullopt;
  }
  std::optional<std::chrono::steady_clock::time_point> oldest;
  const auto consider = [&oldest](std::chrono::steady_clock::time_point t) {
    if (!oldest || t < *oldest) {
      oldest = t;
    }
  };
  for (const IoRequest* r : sent_) {
    consider(r->sent_at);
  }
  for (const auto& sent : {identity_sent_at_, nop_sent_at_}) {
    if (sent) {
      consider(*sent);
    }
  }
  if (!oldest) {
    return std::nullopt;
  }
  return std::max(*oldest, last_heard_);
}

void CommandQueue::Expire() {
  expired_ = true;
  FailWaiting();
}

void CommandQueue::FailClosed() {
  failed_closed_ = true;
  FailWaiting();
}

void CommandQueue::Fence() {
  if (failed_closed_) {
    return;
  }
  FailClosed();
  if (options_.on_fenced) {
    options_.on_fenced();
  }
}

void CommandQueue::SetReservationKey(uint64_t key) {
  reservation_key_ = key;
  renewing_to_ = 0;
  renewed_at_ = std::chrono::steady_clock::now();
}

void CommandQueue::RenewIfDue(std::chrono::steady_clock::time_point now) {
  // Checked once a tick (a second): due half a tick early, so that the period is not
  // stretched to the next tick.
  if (reservation_key_ == 0 || options_.renew_every.count() <= 0 || renewing_to_ != 0 ||
      now - renewed_at_ + std::chrono::milliseconds(500) < options_.renew_every) {
    return;
  }
  const uint64_t fresh = iscsi::FreshKey(reservation_key_, {reservation_key_});
  scsi_persistent_reserve_out_basic params{};
  params.reservation_key = reservation_key_;
  params.service_action_reservation_key = fresh;
  if (iscsi_persistent_reserve_out_task(
          ctx_.get(), static_cast<int>(options_.lun), SCSI_PERSISTENT_RESERVE_REGISTER,
          SCSI_PERSISTENT_RESERVE_SCOPE_LU, 0, &params, &OnRenewed, this) != nullptr) {
    renewing_to_ = fresh;
  }
}

void CommandQueue::OnRenewed(iscsi_context* ctx, int status, void* command_data,
                             void* private_data) {
  iscsi::ScsiTask task(static_cast<scsi_task*>(command_data));
  auto* self = static_cast<CommandQueue*>(private_data);
  if (self->stopping_ || ctx != self->ctx_.get() || status == SCSI_STATUS_CANCELLED) {
    return;  // A connection that is gone: the next login claims under a key of its own.
  }
  self->Heard(status);
  const uint64_t fresh = std::exchange(self->renewing_to_, 0);
  if (status == SCSI_STATUS_GOOD && fresh != 0) {
    self->reservation_key_ = fresh;
    self->renewed_at_ = std::chrono::steady_clock::now();
    if (self->options_.on_renewed) {
      self->options_.on_renewed(fresh);
    }
  } else if (status == SCSI_STATUS_RESERVATION_CONFLICT) {
    self->Fence();  // The registration is gone: another node preempted it.
  }
  // Anything else (a unit attention, a dropped connection) waits for the next tick or login.
}

void CommandQueue::FailWaiting() {
  for (auto* queue : {&parked_, &retry_on_tick_}) {
    for (auto& r : *queue) {
      r->Fail(EIO, options_.counters);
    }
    queue->clear();
  }
}

void CommandQueue::OnTick() {
  if (!retry_on_tick_.empty()) {
    std::deque<std::unique_ptr<IoRequest>> todo;
    todo.swap(retry_on_tick_);
    for (auto& r : todo) {
      Submit(std::move(r));  // Parks itself if there is no connection right now.
    }
  }
  if (ctx_ == nullptr || failed_closed_ || need_reconnect_) {
    return;  // No checks on a connection about to be replaced.
  }
  // libiscsi has no timers: command timeouts advance only in iscsi_service.
  if (iscsi_service(ctx_.get(), 0) < 0) {
    RequestReconnect(absl::StrCat("connection error: ", iscsi_get_error(ctx_.get())));
    return;
  }
  if (ticks_ % kIdentityCheckEveryTicks == 0 && identity_checks_in_flight_ == 0) {
    CheckIdentity();
  }
  // Command timeouts are off (a slow target is not a dead one), so a target that answers NOPs
  // but no longer completes commands (a hung backing store) would hold I/O for ever: a command
  // without an answer for the replacement timeout (30 s at most) replaces the connection, and
  // the requests then wait at most the replacement timeout in all.
  const auto answer_limit =
      std::min<std::chrono::seconds>(options_.replacement_timeout, std::chrono::seconds(30));
  const auto now = std::chrono::steady_clock::now();
  for (const IoRequest* r : sent_) {
    if (now - r->sent_at >= answer_limit) {
      RequestReconnect(absl::StrCat("a command got no answer for ", answer_limit.count(), " s"));
      return;
    }
  }
  const auto silence_limit = std::min<std::chrono::seconds>(
      kSilenceLimit, std::max(options_.replacement_timeout, std::chrono::seconds(1)));
  if (const auto silent = SilentSince(); silent && now - *silent >= silence_limit) {
    RequestReconnect(absl::StrCat("the target answered nothing (no NOP-In, no command) for ",
                                  silence_limit.count(), " s"));
    return;
  }
  ++ticks_;
  RenewIfDue(now);
  if (!nop_sent_at_ && iscsi_nop_out_async(ctx_.get(), &OnNopIn, nullptr, 0, this) == 0) {
    nop_sent_at_ = now;
  }
}

}  // namespace stagehand::session
