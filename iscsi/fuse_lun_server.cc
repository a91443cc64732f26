#define FUSE_USE_VERSION 34

#include "iscsi/fuse_lun_server.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/falloc.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <unordered_set>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_cat.h>

#include "base/paths.h"
#include "base/unique_fd.h"
#include "iscsi/iscsi_handles.h"

namespace stagehand::iscsi {
namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;
constexpr fuse_ino_t kLunIno = 2;
constexpr int kTickSeconds = 1;
constexpr int kNopEveryTicks = 5;
constexpr int kMaxNopsInFlight = 3;
constexpr int kMaxRetriesPerRequest = 1000;
// A LUN deleted and created again on the target (another disk under the same target and
// number) is not always announced on that LUN (tgtd raises its unit attention on the other LUNs
// of the nexus only): the identity is read again on the live connection this often.
constexpr int kIdentityCheckEveryTicks = 1;
// The kernel splits larger I/O into FUSE requests of at most this size and sends them all at
// once, so the target works on one piece while the next is copied and on the wire (1 MiB
// sequential writes at queue depth 1 gained a quarter; see bench/README.md). It matches the
// burst sizes tuned targets take as immediate data.
constexpr unsigned kMaxRequestBytes = 256 * 1024;
// Free I/O buffers kept for reuse: fresh memory costs a page fault per page, which in a VM is
// more than the copy itself. At most this many stay allocated while idle.
constexpr size_t kMaxSpareBuffers = 16;
// Big enough for any request the kernel sends (blocks covering kMaxRequestBytes) for block
// sizes up to 64 KiB.
constexpr size_t kBufferBytes = kMaxRequestBytes + 2 * 64 * 1024;

// libiscsi's command timeout drops a timed-out PDU from its queues even when it is partly
// written to the socket, which corrupts the stream. Once serving, liveness comes from NOP-Outs
// (see OnTick) instead.
void DisableCommandTimeouts(iscsi_context* ctx) {
  (void)iscsi_set_timeout(ctx, 0);
}

}  // namespace

// One FUSE read or write on its way through iSCSI. Owned by the libiscsi task's private data
// while in flight, by the retry queue while parked.
struct IoRequest {
  fuse_req_t req = nullptr;
  bool write = false;
  bool flush = false;
  uint64_t lba = 0;
  uint64_t blocks = 0;
  size_t slice_offset = 0;  // Reads: where the requested bytes start in `buffer`.
  size_t slice_length = 0;  // Reads: requested bytes; writes: bytes acknowledged.
  // Reads: the whole blocks covering the request, libiscsi puts the data-in here directly;
  // writes: the payload, copied out of libfuse's receive buffer (reused by the next request).
  std::unique_ptr<uint8_t[]> buffer;
  size_t buffer_size = 0;
  scsi_iovec iov{};  // Reads: points into `buffer` (lives as long as the task).
  int retries = 0;
  // When it first had to wait for a connection (zero: never): a request waits at most the
  // replacement timeout in all, even when logins succeed and the connection drops again.
  std::chrono::steady_clock::time_point parked_at{};
  std::chrono::steady_clock::time_point sent_at{};  // When it was last sent to the target.
  FuseLunServer::Impl* server = nullptr;

  IoRequest() = default;
  IoRequest(const IoRequest&) = delete;
  IoRequest& operator=(const IoRequest&) = delete;
  ~IoRequest();
};

struct FuseLunServer::Impl {
  FuseLunServerOptions options;
  IscsiContext ctx;  // Null while reconnecting.
  fuse_session* session = nullptr;
  bool mounted = false;
  size_t portal_index = 0;
  ServerStatus status;
  bool need_reconnect = false;
  bool stopping = false;         // Being destroyed: completions are dropped.
  std::string reconnect_reason;  // Why the connection is being replaced (status message).
  bool failed_closed = false;
  std::chrono::steady_clock::time_point last_reconnect;
  int flap_backoff_ms = 0;
  int ticks = 0;
  size_t inflight = 0;
  std::unordered_set<IoRequest*> sent;  // In flight on the connection (owned by their tasks).
  int identity_checks_in_flight = 0;    // VPD reads of the periodic identity check.
  // Since when there is no usable connection (set when a reconnect starts, cleared on login).
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  bool replacement_expired = false;  // lost_since is older than the replacement timeout.
  std::deque<std::unique_ptr<IoRequest>> parked;          // Waiting for a reconnect.
  std::deque<std::unique_ptr<IoRequest>> retry_on_tick;   // Waiting for the next tick.
  std::vector<std::unique_ptr<uint8_t[]>> spare_buffers;  // Each kBufferBytes.

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    // Commands still in flight complete during the logout below, after the FUSE session is
    // gone: they are dropped, never answered or resubmitted.
    stopping = true;
    if (session != nullptr) {
      if (mounted) {
        fuse_session_unmount(session);
      }
      fuse_session_destroy(session);
    }
    if (ctx != nullptr) {
      (void)iscsi_logout_sync(ctx.get());
      DestroyContext();
    }
    // Parked requests hand their buffers back to `spare_buffers`: drop them first.
    parked.clear();
    retry_on_tick.clear();
  }

  // Destroying a context runs the callbacks of its commands with SCSI_STATUS_CANCELLED; they
  // park themselves (see OnTaskDone), so `ctx` is cleared first.
  void DestroyContext() {
    IscsiContext old = std::exchange(ctx, nullptr);
    old.reset();
  }

  uint64_t CapacityBytes() const { return options.capacity.Bytes(); }

  uint32_t BlockSize() const { return options.capacity.block_size; }

  void Publish(ServerState state, std::string message) {
    status.state = state;
    status.message = std::move(message);
    status.portal = options.login.portal.ToString();
    status.capacity_bytes = CapacityBytes();
    if (options.on_status) {
      options.on_status(status);
    }
  }

  void Submit(std::unique_ptr<IoRequest> r) {
    if (failed_closed) {
      Fail(*r, EIO);
      return;
    }
    if (ctx == nullptr || need_reconnect) {
      if (replacement_expired) {
        Fail(*r, EIO);  // The target has been gone too long: nothing may hang on it.
        return;
      }
      // No connection, or one about to be replaced (after a unit attention that may mean
      // another LUN, nothing more may be sent on it): wait for the next login.
      Park(std::move(r));
      return;
    }
    IoRequest* raw = r.get();
    scsi_task* task = nullptr;
    const int lun = static_cast<int>(options.login.lun);
    if (raw->flush) {
      task = iscsi_synchronizecache10_task(ctx.get(), lun, 0, 0, 0, 0, &OnTaskDone, raw);
    } else if (raw->write) {
      task = iscsi_write16_task(ctx.get(), lun, raw->lba, raw->buffer.get(),
                                static_cast<uint32_t>(raw->slice_length),
                                static_cast<int>(BlockSize()), 0, 0, 0, 0, 0, &OnTaskDone, raw);
    } else {
      const auto bytes = static_cast<uint32_t>(raw->blocks * BlockSize());
      task = iscsi_read16_task(ctx.get(), lun, raw->lba, bytes, static_cast<int>(BlockSize()), 0, 0,
                               0, 0, 0, &OnTaskDone, raw);
      if (task != nullptr) {
        // Nothing was received yet (this thread runs the socket): the data-in goes straight
        // into our buffer instead of libiscsi's reassembly buffer.
        raw->iov.iov_base = raw->buffer.get();
        raw->iov.iov_len = bytes;
        scsi_task_set_iov_in(task, &raw->iov, 1);
      }
    }
    if (task == nullptr) {
      // Could not even queue it: the context is unusable. Park and reconnect.
      Park(std::move(r));
      RequestReconnect(absl::StrCat("cannot queue a command: ", iscsi_get_error(ctx.get())));
      return;
    }
    ++inflight;
    raw->sent_at = std::chrono::steady_clock::now();
    sent.insert(raw);
    (void)r.release();  // Owned by the task's private data until OnTaskDone.
  }

  static void OnTaskDone(iscsi_context* /*ctx*/, int status, void* command_data,
                         void* private_data) {
    ScsiTask task(static_cast<scsi_task*>(command_data));
    std::unique_ptr<IoRequest> r(static_cast<IoRequest*>(private_data));
    Impl* self = r->server;
    --self->inflight;
    self->sent.erase(r.get());
    if (self->stopping) {
      return;
    }
    if (status == SCSI_STATUS_GOOD) {
      self->Reply(*r, *task);
      return;
    }
    // Connection trouble: park and log in again. Target-side conditions that pass (a unit
    // attention after a reset, busy, not ready while the LUN comes back): retry on the next tick.
    const bool connection = status == SCSI_STATUS_CANCELLED || status == SCSI_STATUS_TIMEOUT ||
                            status == SCSI_STATUS_ERROR;
    const bool passing =
        status == SCSI_STATUS_BUSY || status == SCSI_STATUS_TASK_SET_FULL ||
        status == SCSI_STATUS_TASK_ABORTED ||
        (task && task->status == SCSI_STATUS_CHECK_CONDITION &&
         (task->sense.key == SCSI_SENSE_UNIT_ATTENTION || task->sense.key == SCSI_SENSE_NOT_READY));
    // The LUN may have been reset, remapped or replaced: re-read its identity (a new login)
    // before anything more is sent, and fail closed if it is another one.
    const bool recheck =
        task && IsUnitAttention(*task) && UnitAttentionMayChangeTheLun(task->sense.ascq);
    if (recheck && ++r->retries < kMaxRetriesPerRequest) {
      if (self->ctx != nullptr) {
        self->RecheckIdentityAfter(*task);
      }
      self->Park(std::move(r));
      return;
    }
    if ((connection || passing) && ++r->retries < kMaxRetriesPerRequest) {
      if (connection) {
        // While the context is being destroyed (ctx is null then), its cancelled commands
        // only park: asking for another reconnect here would replace the new connection
        // right after the login, again on every login.
        if (self->ctx != nullptr) {
          self->RequestReconnect(status == SCSI_STATUS_TIMEOUT     ? "a command timed out"
                                 : status == SCSI_STATUS_CANCELLED ? "a command was cancelled"
                                                                   : "a command failed");
        }
        self->Park(std::move(r));
      } else if (task->status == SCSI_STATUS_CHECK_CONDITION &&
                 task->sense.key == SCSI_SENSE_UNIT_ATTENTION) {
        self->Submit(std::move(r));  // A unit attention is reported once: retry right away.
      } else {
        self->retry_on_tick.push_back(std::move(r));
      }
      return;
    }
    self->Fail(*r, EIO);
  }

  void Fail(IoRequest& r, int error) const {
    CountAdd(options.counters, &DataPathCounters::io_errors, 1);
    fuse_reply_err(r.req, error);
  }

  void Reply(IoRequest& r, const scsi_task& task) const {
    if (r.flush) {
      CountAdd(options.counters, &DataPathCounters::flush_ops, 1);
      fuse_reply_err(r.req, 0);
    } else if (r.write) {
      CountAdd(options.counters, &DataPathCounters::write_ops, 1);
      CountAdd(options.counters, &DataPathCounters::write_bytes, r.slice_length);
      fuse_reply_write(r.req, r.slice_length);
    } else {
      // A short read would leave stale bytes in the buffer.
      if (task.residual_status == SCSI_RESIDUAL_UNDERFLOW && task.residual > 0) {
        Fail(r, EIO);
        return;
      }
      CountAdd(options.counters, &DataPathCounters::read_ops, 1);
      CountAdd(options.counters, &DataPathCounters::read_bytes, r.slice_length);
      fuse_reply_buf(r.req, reinterpret_cast<const char*>(r.buffer.get()) + r.slice_offset,
                     r.slice_length);
    }
  }

  void Park(std::unique_ptr<IoRequest> r) {
    if (r->parked_at == std::chrono::steady_clock::time_point{}) {
      r->parked_at = std::chrono::steady_clock::now();
    }
    parked.push_back(std::move(r));
  }

  void ResubmitParked() {
    std::deque<std::unique_ptr<IoRequest>> todo;
    todo.swap(parked);
    const auto now = std::chrono::steady_clock::now();
    for (auto& r : todo) {
      if (now - r->parked_at >= options.replacement_timeout) {
        Fail(*r, EIO);  // Waited too long over connections that keep dropping.
        continue;
      }
      Submit(std::move(r));
    }
  }

  // Takes a new capacity if the LUN grew; never shrinks under a filesystem. Drops the kernel's
  // cached size of the LUN file so that LOOP_SET_CAPACITY sees the new one.
  void GrowTo(const LunCapacity& cap) {
    if (cap.block_size != BlockSize() || cap.Bytes() <= CapacityBytes()) {
      return;
    }
    options.capacity = cap;
    if (session != nullptr) {
      (void)fuse_lowlevel_notify_inval_inode(session, kLunIno, 0, 0);
    }
  }

  // READ CAPACITY(16) on the live session; publishes the (possibly new) size when it answers.
  void RefreshCapacity() {
    if (ctx == nullptr || failed_closed || need_reconnect) {
      ++status.capacity_refreshes;  // Nothing to read now; reconnect re-reads it anyway.
      Publish(status.state, status.message);
      return;
    }
    auto done = [](iscsi_context*, int st, void* command_data, void* private_data) {
      ScsiTask task(static_cast<scsi_task*>(command_data));
      auto* self = static_cast<Impl*>(private_data);
      if (st == SCSI_STATUS_GOOD) {
        if (auto* rc = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task.get()));
            rc != nullptr) {
          self->GrowTo({rc->returned_lba + 1, rc->block_length});
        }
      } else if (!self->stopping && task && IsUnitAttention(*task)) {
        // A unit attention is reported once, and this command took it: "capacity changed"
        // (what an expansion raises) is asked again; one that may mean another LUN gets the
        // identity checked by a new login (which reads the capacity too).
        if (task->sense.ascq == 0x2a09 || !UnitAttentionMayChangeTheLun(task->sense.ascq)) {
          self->RefreshCapacity();
          return;
        }
        self->RecheckIdentityAfter(*task);
      }
      ++self->status.capacity_refreshes;
      self->Publish(self->status.state, self->status.message);
    };
    if (iscsi_readcapacity16_task(ctx.get(), static_cast<int>(options.login.lun), done, this) ==
        nullptr) {
      RequestReconnect(absl::StrCat("cannot queue READ CAPACITY: ", iscsi_get_error(ctx.get())));
    }
  }

  // Reads VPD 0x83 and 0x80 on the live connection; a LUN that answers with another identity,
  // or reports a unit attention that may mean another LUN, gets a new login (which reads the
  // whole identity again and fails closed on another LUN) before more I/O is sent.
  void CheckIdentity() {
    const int lun = static_cast<int>(options.login.lun);
    for (int page : {0x83, 0x80}) {
      if (iscsi_inquiry_task(ctx.get(), lun, 1, page, 255, &OnIdentityPage, this) != nullptr) {
        ++identity_checks_in_flight;
      }
    }
  }

  static void OnIdentityPage(iscsi_context*, int status, void* command_data, void* private_data) {
    ScsiTask task(static_cast<scsi_task*>(command_data));
    auto* self = static_cast<Impl*>(private_data);
    --self->identity_checks_in_flight;
    if (self->stopping || self->failed_closed || !task) {
      return;
    }
    if (status != SCSI_STATUS_GOOD) {
      if (IsUnitAttention(*task) && UnitAttentionMayChangeTheLun(task->sense.ascq)) {
        self->RecheckIdentityAfter(*task);
      }
      return;  // Connection trouble shows on the I/O and the NOPs.
    }
    const std::span<const uint8_t> page(task->datain.data, static_cast<size_t>(task->datain.size));
    const LunIdentity& known = self->options.identity;
    bool changed = false;
    if (page.size() >= 2 && page[1] == 0x83) {
      auto designators = ParseDeviceIdentificationPage(page);
      changed = designators.ok() && *designators != known.designators;
    } else if (page.size() >= 2 && page[1] == 0x80) {
      auto serial = ParseUnitSerialPage(page);
      changed = serial.ok() && *serial != known.serial;
    }
    if (changed && self->ctx != nullptr) {
      self->RequestReconnect("the LUN answers with another identity; reading it again");
    }
  }

  static bool IsUnitAttention(const scsi_task& task) {
    return task.status == SCSI_STATUS_CHECK_CONDITION &&
           task.sense.key == SCSI_SENSE_UNIT_ATTENTION;
  }

  // After a unit attention that may mean another LUN: a new login re-reads the identity before
  // anything more is sent (and fails closed on another LUN).
  void RecheckIdentityAfter(const scsi_task& task) {
    RequestReconnect(absl::StrCat("the target reported a unit attention (",
                                  scsi_sense_ascq_str(task.sense.ascq),
                                  "); reading the LUN identity again"));
  }

  // The first reason wins until the reconnect starts.
  void RequestReconnect(std::string why) {
    if (!need_reconnect) {
      reconnect_reason = std::move(why);
    }
    need_reconnect = true;
  }

  void FailClosed(const std::string& why) {
    failed_closed = true;
    for (auto& r : parked) {
      Fail(*r, EIO);
    }
    parked.clear();
    for (auto& r : retry_on_tick) {
      Fail(*r, EIO);
    }
    retry_on_tick.clear();
    Publish(ServerState::kIdentityMismatch, why);
  }

  // Once the connection has been gone for the replacement timeout: parked and queued requests
  // fail with EIO, and so does every new one until a login succeeds (the reconnects go on).
  void ExpireIfDue() {
    if (replacement_expired || !lost_since ||
        std::chrono::steady_clock::now() - *lost_since < options.replacement_timeout) {
      return;
    }
    replacement_expired = true;
    // The status first: whoever sees an I/O fail must find the reason in the status already.
    Publish(ServerState::kReconnecting,
            absl::StrCat("no connection to the target for ", options.replacement_timeout.count(),
                         " s (replacement timeout): I/O fails with EIO until it is back; ",
                         status.message));
    for (auto* queue : {&parked, &retry_on_tick}) {
      for (auto& r : *queue) {
        Fail(*r, EIO);
      }
      queue->clear();
    }
  }

  // Waits `ms` for `stop_fd`; while the replacement timeout has expired, FUSE requests that come
  // in meanwhile are answered (with EIO) instead of waiting. False when stopping or unmounted.
  bool WaitBeforeNextLogin(int stop_fd, fuse_buf& buf, int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (true) {
      ExpireIfDue();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return true;
      }
      std::array<pollfd, 2> fds{{{stop_fd, POLLIN, 0}, {fuse_session_fd(session), POLLIN, 0}}};
      const nfds_t n = replacement_expired ? 2 : 1;
      if (poll(fds.data(), n, static_cast<int>(left.count())) < 0 && errno != EINTR) {
        return false;
      }
      if (fds[0].revents != 0) {
        return false;
      }
      if (n == 2 && fds[1].revents != 0 && !ServeFuse(buf)) {
        return false;
      }
    }
  }

  // Logs in again, rotating through the portals, until it works, the LUN turns out to be a
  // different one, or `stop_fd` fires. Returns false when stopping.
  bool Reconnect(int stop_fd, fuse_buf& buf) {
    DestroyContext();
    need_reconnect = false;
    if (!lost_since) {
      lost_since = std::chrono::steady_clock::now();
    }
    Publish(ServerState::kReconnecting,
            absl::StrCat("connection lost (", reconnect_reason, "); logging in again"));
    // A connection that drops again right after a reconnect is flapping: back off before the
    // next login instead of spinning through logins and retries.
    const auto now = std::chrono::steady_clock::now();
    if (now - last_reconnect < std::chrono::seconds(2)) {
      flap_backoff_ms = std::min(flap_backoff_ms == 0 ? 250 : flap_backoff_ms * 2, 5000);
      if (!WaitBeforeNextLogin(stop_fd, buf, flap_backoff_ms)) {
        return false;
      }
    } else {
      flap_backoff_ms = 0;
    }
    int backoff_ms = 250;
    size_t attempt = 0;
    while (true) {
      LoginParams params = options.login;
      if (!options.portals.empty()) {
        params.portal = options.portals[(portal_index + attempt) % options.portals.size()];
      }
      ++attempt;
      auto conn = Connection::Login(params);
      if (conn.ok()) {
        auto identity = (*conn)->ReadIdentity();
        if (identity.ok()) {
          if (auto same = CheckSameLun(options.identity, *identity); !same.ok()) {
            FailClosed(std::string(same.message()));
            return true;
          }
          if (auto cap = (*conn)->ReadCapacity(); cap.ok()) {
            GrowTo(*cap);
          }
          options.login.portal = params.portal;
          portal_index = (portal_index + attempt - 1) % std::max<size_t>(options.portals.size(), 1);
          ctx = (*conn)->ReleaseContext();
          DisableCommandTimeouts(ctx.get());
          last_reconnect = std::chrono::steady_clock::now();
          lost_since.reset();
          replacement_expired = false;
          ++status.reconnects;
          Publish(ServerState::kUp, "reconnected");
          ResubmitParked();
          return true;
        }
      }
      const std::string why =
          conn.ok() ? "cannot read LUN identity" : std::string(conn.status().message());
      Publish(ServerState::kReconnecting,
              absl::StrCat(replacement_expired ? "I/O fails with EIO (replacement timeout); " : "",
                           "reconnect failed: ", why));
      if (!WaitBeforeNextLogin(stop_fd, buf, backoff_ms)) {
        return false;
      }
      backoff_ms = std::min(backoff_ms * 2, 5000);
    }
  }

  // FUSE operations. `fuse_req_userdata(req)` is the Impl.
  static Impl* Self(fuse_req_t req) { return static_cast<Impl*>(fuse_req_userdata(req)); }

  struct stat LunStat() const {
    struct stat st {};

    st.st_ino = kLunIno;
    st.st_mode = S_IFREG | 0600;
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(CapacityBytes());
    st.st_blksize = static_cast<blksize_t>(BlockSize());
    st.st_blocks = static_cast<blkcnt_t>(CapacityBytes() / 512);
    return st;
  }

  // Buffers of kBufferBytes come from (and go back to) the spares; others are one-offs.
  void AllocateBuffer(IoRequest& r, size_t bytes) {
    r.buffer_size = std::max(bytes, kBufferBytes);
    if (r.buffer_size == kBufferBytes && !spare_buffers.empty()) {
      r.buffer = std::move(spare_buffers.back());
      spare_buffers.pop_back();
    } else {
      r.buffer.reset(new uint8_t[r.buffer_size]);  // Not zeroed: every used byte is written.
    }
  }

  void ReleaseBuffer(IoRequest& r) {
    if (r.buffer != nullptr && r.buffer_size == kBufferBytes &&
        spare_buffers.size() < kMaxSpareBuffers) {
      spare_buffers.push_back(std::move(r.buffer));
    }
  }

  static void OpInit(void* /*userdata*/, fuse_conn_info* conn) {
    conn->max_write = kMaxRequestBytes;
    conn->max_read = kMaxRequestBytes;  // Must match the max_read mount option.
    conn->max_background = 64;
    conn->congestion_threshold = 48;
    conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }

  static void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Impl* self = Self(req);
    if (parent != kRootIno || self->options.file_name != name) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_entry_param e{};
    e.ino = kLunIno;
    e.attr = self->LunStat();
    e.attr_timeout = 1.0;
    e.entry_timeout = 1.0;
    fuse_reply_entry(req, &e);
  }

  static void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
    Impl* self = Self(req);
    if (ino == kRootIno) {
      struct stat st {};

      st.st_ino = kRootIno;
      st.st_mode = S_IFDIR | 0700;
      st.st_nlink = 2;
      fuse_reply_attr(req, &st, 1.0);
    } else if (ino == kLunIno) {
      struct stat st = self->LunStat();
      fuse_reply_attr(req, &st, 1.0);
    } else {
      fuse_reply_err(req, ENOENT);
    }
  }

  static void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    if (ino != kLunIno) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    fi->direct_io = 1;  // No page cache in between: the loop device above caches already.
    fi->keep_cache = 0;
    fuse_reply_open(req, fi);
  }

  static void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     fuse_file_info* /*fi*/) {
    Impl* self = Self(req);
    if (ino != kLunIno || off < 0) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    const uint64_t cap = self->CapacityBytes();
    const auto start = static_cast<uint64_t>(off);
    if (start >= cap || size == 0) {
      fuse_reply_buf(req, nullptr, 0);
      return;
    }
    const uint64_t end = std::min<uint64_t>(start + size, cap);  // Clamp at the end of the LUN.
    const uint64_t bs = self->BlockSize();
    const uint64_t first = start / bs;
    const uint64_t last = (end + bs - 1) / bs;  // Exclusive.
    auto r = std::make_unique<IoRequest>();
    r->req = req;
    r->server = self;
    r->lba = first;
    r->blocks = static_cast<uint32_t>(last - first);
    r->slice_offset = static_cast<size_t>(start - first * bs);
    r->slice_length = static_cast<size_t>(end - start);
    self->AllocateBuffer(*r, r->blocks * bs);
    self->Submit(std::move(r));
  }

  static void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                      fuse_file_info* /*fi*/) {
    Impl* self = Self(req);
    const uint64_t bs = self->BlockSize();
    if (ino != kLunIno || off < 0) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    const auto start = static_cast<uint64_t>(off);
    // The loop device sends whole logical blocks (its block size is the LUN's). A partial-block
    // write would need read-modify-write; refuse it rather than round.
    if (start % bs != 0 || size % bs != 0) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    const uint64_t cap = self->CapacityBytes();
    if (start >= cap) {
      fuse_reply_err(req, size == 0 ? 0 : ENOSPC);
      return;
    }
    const uint64_t len = std::min<uint64_t>(size, cap - start);  // Short write at the end.
    if (len == 0) {
      fuse_reply_write(req, 0);
      return;
    }
    auto r = std::make_unique<IoRequest>();
    r->req = req;
    r->server = self;
    r->write = true;
    r->lba = start / bs;
    r->blocks = static_cast<uint32_t>(len / bs);
    r->slice_length = static_cast<size_t>(len);
    self->AllocateBuffer(*r, len);
    std::memcpy(r->buffer.get(), buf, len);
    self->Submit(std::move(r));
  }

  static void OpFsync(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/,
                      fuse_file_info* /*fi*/) {
    Impl* self = Self(req);
    auto r = std::make_unique<IoRequest>();
    r->req = req;
    r->server = self;
    r->flush = true;
    self->Submit(std::move(r));
  }

  static void OpFlush(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* /*fi*/) {
    fuse_reply_err(req, 0);
  }

  static void OpRelease(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* /*fi*/) {
    fuse_reply_err(req, 0);
  }

  static void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        fuse_file_info* /*fi*/) {
    Impl* self = Self(req);
    if (ino != kRootIno) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    std::vector<char> buf(size);
    size_t used = 0;

    struct Entry {
      const char* name;
      fuse_ino_t ino;
      mode_t mode;
    };

    const Entry entries[] = {{".", kRootIno, S_IFDIR},
                             {"..", kRootIno, S_IFDIR},
                             {self->options.file_name.c_str(), kLunIno, S_IFREG}};
    for (off_t i = off; i < 3; ++i) {
      struct stat st {};

      st.st_ino = entries[i].ino;
      st.st_mode = entries[i].mode;
      const size_t need =
          fuse_add_direntry(req, buf.data() + used, size - used, entries[i].name, &st, i + 1);
      if (need > size - used) {
        break;
      }
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  // Allocation requests are no-ops (every block of a LUN exists). Zeroing and punching holes are
  // refused, so the kernel writes zeros itself: tgtd drops the connection on some WRITE SAME
  // commands (seen after a reconnect), so we do not offload them. See the closing note of issue 2.
  static void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                          fuse_file_info* /*fi*/) {
    Impl* self = Self(req);
    if (ino != kLunIno || offset < 0 || length <= 0) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    if ((mode & ~FALLOC_FL_KEEP_SIZE) != 0) {
      fuse_reply_err(req, EOPNOTSUPP);
      return;
    }
    const bool fits =
        static_cast<uint64_t>(offset) + static_cast<uint64_t>(length) <= self->CapacityBytes();
    fuse_reply_err(req, fits ? 0 : EFBIG);
  }

  static fuse_lowlevel_ops Ops() {
    fuse_lowlevel_ops ops{};
    ops.init = &OpInit;
    ops.lookup = &OpLookup;
    ops.getattr = &OpGetattr;
    ops.open = &OpOpen;
    ops.read = &OpRead;
    ops.write = &OpWrite;
    ops.flush = &OpFlush;
    ops.release = &OpRelease;
    ops.fsync = &OpFsync;
    ops.readdir = &OpReaddir;
    ops.fallocate = &OpFallocate;
    return ops;
  }

  // Drains every request the kernel has queued. Returns false once the mount is gone.
  bool ServeFuse(fuse_buf& buf) const {
    while (true) {
      const int res = fuse_session_receive_buf(session, &buf);
      if (res == -EAGAIN || res == -EINTR) {
        return true;
      }
      if (res <= 0 || fuse_session_exited(session) != 0) {
        return false;
      }
      fuse_session_process_buf(session, &buf);
    }
  }

  void OnTick() {
    if (!retry_on_tick.empty()) {
      std::deque<std::unique_ptr<IoRequest>> todo;
      todo.swap(retry_on_tick);
      for (auto& r : todo) {
        Submit(std::move(r));  // Parks itself if there is no connection right now.
      }
    }
    if (ctx == nullptr || failed_closed || need_reconnect) {
      return;  // No checks on a connection about to be replaced.
    }
    // libiscsi has no timers: command timeouts advance only in iscsi_service.
    if (iscsi_service(ctx.get(), 0) < 0) {
      RequestReconnect(absl::StrCat("connection error: ", iscsi_get_error(ctx.get())));
      return;
    }
    if (ticks % kIdentityCheckEveryTicks == 0 && identity_checks_in_flight == 0) {
      CheckIdentity();
    }
    // Command timeouts are off (a slow target is not a dead one), so a target that answers NOPs
    // but no longer completes commands (a hung backing store) would hold I/O for ever: a
    // command without an answer for the replacement timeout (30 s at most) replaces the
    // connection, and the requests then wait at most the replacement timeout in all.
    const auto answer_limit =
        std::min<std::chrono::seconds>(options.replacement_timeout, std::chrono::seconds(30));
    const auto now = std::chrono::steady_clock::now();
    for (const IoRequest* r : sent) {
      if (now - r->sent_at >= answer_limit) {
        RequestReconnect(absl::StrCat("a command got no answer for ", answer_limit.count(), " s"));
        return;
      }
    }
    if (++ticks % kNopEveryTicks == 0) {
      if (iscsi_get_nops_in_flight(ctx.get()) > kMaxNopsInFlight) {
        RequestReconnect(absl::StrCat(iscsi_get_nops_in_flight(ctx.get()), " NOP-Outs unanswered"));
        return;
      }
      (void)iscsi_nop_out_async(ctx.get(), nullptr, nullptr, 0, nullptr);
    }
  }
};

IoRequest::~IoRequest() {
  server->ReleaseBuffer(*this);
}

FuseLunServer::FuseLunServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FuseLunServer::~FuseLunServer() = default;

std::string FuseLunServer::LunPath() const {
  return JoinPath(impl_->options.mountpoint, impl_->options.file_name);
}

absl::StatusOr<std::unique_ptr<FuseLunServer>> FuseLunServer::Create(
    FuseLunServerOptions options, std::unique_ptr<Connection> connection) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->status.capacity_bytes = impl->CapacityBytes();
  for (size_t i = 0; i < impl->options.portals.size(); ++i) {
    if (impl->options.portals[i] == impl->options.login.portal) {
      impl->portal_index = i;
    }
  }
  const std::string fsname =
      absl::StrCat("-ofsname=stagehand,subtype=iscsi,max_read=", kMaxRequestBytes);
  std::vector<char*> argv = {const_cast<char*>("stagehand-session"),
                             const_cast<char*>(fsname.c_str())};
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  const fuse_lowlevel_ops ops = Impl::Ops();
  impl->session = fuse_session_new(&args, &ops, sizeof(ops), impl.get());
  fuse_opt_free_args(&args);
  if (impl->session == nullptr) {
    return absl::InternalError("cannot create FUSE session");
  }
  if (fuse_session_mount(impl->session, impl->options.mountpoint.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot mount FUSE at '", impl->options.mountpoint, "'"));
  }
  impl->mounted = true;
  const int fd = fuse_session_fd(impl->session);
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "set /dev/fuse non-blocking");
  }
  impl->ctx = connection->ReleaseContext();
  DisableCommandTimeouts(impl->ctx.get());
  return std::unique_ptr<FuseLunServer>(new FuseLunServer(std::move(impl)));
}

absl::Status FuseLunServer::Run(int stop_fd, int refresh_fd) {
  Impl& s = *impl_;
  UniqueFd timer(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer) {
    return ErrnoStatus(errno, "timerfd_create");
  }
  itimerspec spec{};
  spec.it_interval.tv_sec = kTickSeconds;
  spec.it_value.tv_sec = kTickSeconds;
  if (timerfd_settime(timer.Get(), 0, &spec, nullptr) != 0) {
    return ErrnoStatus(errno, "timerfd_settime");
  }
  fuse_buf buf{};
  absl::Cleanup free_buf = [&buf] { free(buf.mem); };
  s.Publish(ServerState::kUp, "serving");
  const int fuse_fd = fuse_session_fd(s.session);
  while (true) {
    if (s.need_reconnect && !s.failed_closed) {
      if (!s.Reconnect(stop_fd, buf)) {
        break;
      }
    }
    std::array<pollfd, 5> fds{};
    fds[0] = {fuse_fd, POLLIN, 0};
    fds[1] = {stop_fd, POLLIN, 0};
    fds[2] = {timer.Get(), POLLIN, 0};
    fds[3] = {refresh_fd, POLLIN, 0};
    nfds_t n = 4;
    if (s.ctx != nullptr) {
      fds[4] = {iscsi_get_fd(s.ctx.get()), static_cast<short>(iscsi_which_events(s.ctx.get())), 0};
      n = 5;
    }
    if (poll(fds.data(), n, -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      return ErrnoStatus(errno, "poll");
    }
    if (fds[1].revents != 0) {
      break;
    }
    if (n == 5 && fds[4].revents != 0 && s.ctx != nullptr) {
      if (iscsi_service(s.ctx.get(), fds[4].revents) < 0) {
        s.RequestReconnect(absl::StrCat("connection error: ", iscsi_get_error(s.ctx.get())));
      }
    }
    if (fds[3].revents != 0) {
      std::array<char, 128> info{};  // Drain the signalfd (struct signalfd_siginfo is 128 bytes).
      while (read(refresh_fd, info.data(), info.size()) > 0) {
      }
      s.RefreshCapacity();
    }
    if (fds[2].revents != 0) {
      uint64_t expirations = 0;
      (void)!read(timer.Get(), &expirations, sizeof(expirations));
      s.OnTick();
    }
    if (fds[0].revents != 0) {
      if (!s.ServeFuse(buf)) {
        break;  // Unmounted under us.
      }
    }
  }
  // Stopping: answer whatever is parked so the kernel is not left waiting.
  for (auto* queue : {&s.parked, &s.retry_on_tick}) {
    for (auto& r : *queue) {
      s.Fail(*r, EIO);
    }
    queue->clear();
  }
  return absl::OkStatus();
}

}  // namespace stagehand::iscsi
