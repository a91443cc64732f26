#include "session/fuse_ring.h"

#include <liburing.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace stagehand::session {

struct FuseRing::Ring {
  io_uring ring{};
  bool ready = false;

  Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  ~Ring() {
    if (ready) {
      io_uring_queue_exit(&ring);
    }
  }
};

absl::StatusOr<std::unique_ptr<FuseRing>> FuseRing::Start(int fuse_fd, const Options& options) {
  // Commands of other devices share the opcode numbers (on a socket, 1 asks for its send queue).
  struct stat st {};

  if (fstat(fuse_fd, &st) != 0 || !S_ISCHR(st.st_mode)) {
    return absl::FailedPreconditionError("FUSE over io_uring needs /dev/fuse itself");
  }
  auto r = std::unique_ptr<FuseRing>(new FuseRing());
  r->fuse_fd_ = fuse_fd;
  r->held_ = options.held;
  r->queues_ = options.queues != 0 ? options.queues : static_cast<unsigned>(get_nprocs_conf());
  const unsigned depth = std::max(options.depth, 1u);
  const unsigned entries = r->queues_ * depth;
  r->ring_ = std::make_unique<Ring>();
  io_uring_params params{};
  // 128-byte entries carry the FUSE command (struct fuse_uring_cmd_req) inline.
  params.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
  params.cq_entries = entries * 2;
  if (const int rc = io_uring_queue_init_params(entries, &r->ring_->ring, &params); rc < 0) {
    return ErrnoStatus(-rc, "io_uring_queue_init (FUSE over io_uring)");
  }
  r->ring_->ready = true;
  r->entries_.resize(entries);
  for (unsigned i = 0; i < entries; ++i) {
    Entry& e = r->entries_[i];
    e.qid = static_cast<uint16_t>(i / depth);
    e.header = std::make_unique<FuseUringReqHeader>();
    e.payload_bytes = options.payload_bytes;
    e.payload.reset(new uint8_t[e.payload_bytes]);
    std::memset(e.payload.get(), 0, e.payload_bytes);  // Resident from the start.
    e.iov[0] = {e.header.get(), sizeof(FuseUringReqHeader)};
    e.iov[1] = {e.payload.get(), e.payload_bytes};
    SH_RETURN_IF_ERROR(r->Queue(e, kFuseUringCmdRegister));
  }
  SH_RETURN_IF_ERROR(r->Flush());
  // A refused registration (the module parameter off, a payload too small) completes at once
  // with an error; an accepted one stays pending until a request comes.
  io_uring_cqe* cqe = nullptr;
  if (io_uring_peek_cqe(&r->ring_->ring, &cqe) == 0 && cqe != nullptr && cqe->res < 0) {
    return ErrnoStatus(-cqe->res, "register FUSE ring entries");
  }
  return r;
}

FuseRing::~FuseRing() = default;

int FuseRing::Fd() const {
  return ring_->ring.ring_fd;
}

absl::Status FuseRing::Queue(Entry& entry, uint32_t cmd) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  if (sqe == nullptr) {
    SH_RETURN_IF_ERROR(Flush());
    sqe = io_uring_get_sqe(&ring_->ring);
    if (sqe == nullptr) {
      return absl::InternalError("no free io_uring submission entry");
    }
  }
  std::memset(sqe, 0, 128);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_fd_;
  sqe->cmd_op = cmd;
  if (cmd == kFuseUringCmdRegister) {
    sqe->addr = reinterpret_cast<uint64_t>(entry.iov.data());
    sqe->len = static_cast<uint32_t>(entry.iov.size());
  }
  FuseUringCmdReq req{};
  req.qid = entry.qid;
  req.commit_id = cmd == kFuseUringCmdCommitAndFetch ? entry.commit_id : 0;
  std::memcpy(sqe->cmd, &req, sizeof(req));
  io_uring_sqe_set_data(sqe, &entry);
  ++queued_;
  return absl::OkStatus();
}

absl::Status FuseRing::Flush() {
  while (queued_ > 0) {
    const int n = io_uring_submit(&ring_->ring);
    if (n == -EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(-n, "io_uring_submit (FUSE ring)");
    }
    queued_ -= std::min(queued_, static_cast<unsigned>(n));
    if (n == 0) {
      break;
    }
  }
  if (queued_ == 0 && unsubmitted_commits_ > 0) {
    unsubmitted_commits_ = 0;  // The kernel took every answer (a commit is done on submit).
    PublishHeld();
  }
  return absl::OkStatus();
}

void FuseRing::PublishHeld() const {
  if (held_ != nullptr) {
    std::atomic_ref<uint64_t>(*held_).store(in_userspace_.size() + unsubmitted_commits_,
                                            std::memory_order_relaxed);
  }
}

absl::StatusOr<FuseRing::Entry*> FuseRing::NextRequest() {
  while (true) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_peek_cqe(&ring_->ring, &cqe) != 0 || cqe == nullptr) {
      return nullptr;
    }
    auto* entry = static_cast<Entry*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_->ring, cqe);
    if (res == -EINTR || res == -EAGAIN) {
      // Not taken: queue the same command again.
      SH_RETURN_IF_ERROR(Queue(
          *entry, entry->commit_id == 0 ? kFuseUringCmdRegister : kFuseUringCmdCommitAndFetch));
      continue;
    }
    if (res < 0) {
      // ENOTCONN, ECONNABORTED: the connection ended (unmounted, aborted) or the ring is going.
      return ErrnoStatus(-res, "the FUSE ring ended");
    }
    entry->commit_id = entry->header->ring_ent_in_out.commit_id;
    const auto* header = reinterpret_cast<const fuse_in_header*>(entry->header->in_out);
    in_userspace_[header->unique] = entry;
    PublishHeld();
    return entry;
  }
}

FuseRingRequest FuseRing::RequestOf(const Entry& entry) {
  const uint32_t payload = std::min<uint32_t>(entry.header->ring_ent_in_out.payload_sz,
                                              static_cast<uint32_t>(entry.payload_bytes));
  return FuseRingRequest{
      .header = reinterpret_cast<const fuse_in_header*>(entry.header->in_out),
      .op_in = std::span<const uint8_t>(entry.header->op_in, sizeof(entry.header->op_in)),
      .payload = std::span<const uint8_t>(entry.payload.get(), payload),
      .reply_buffer = std::span<uint8_t>(entry.payload.get(), entry.payload_bytes),
  };
}

bool FuseRing::Reply(uint64_t unique, int error,
                     std::initializer_list<std::span<const uint8_t>> payload) {
  auto it = in_userspace_.find(unique);
  if (it == in_userspace_.end()) {
    return false;
  }
  Entry& e = *it->second;
  in_userspace_.erase(it);
  size_t len = 0;
  if (error == 0) {
    for (const auto& piece : payload) {
      const size_t n = std::min(piece.size(), e.payload_bytes - len);
      if (piece.data() != e.payload.get() + len) {  // Not read into place already.
        std::memmove(e.payload.get() + len, piece.data(), n);
      }
      len += n;
    }
  }
  fuse_out_header out{};
  out.unique = unique;
  out.error = -error;
  out.len = static_cast<uint32_t>(sizeof(out) + len);
  std::memcpy(e.header->in_out, &out, sizeof(out));
  e.header->ring_ent_in_out.payload_sz = static_cast<uint32_t>(len);
  // Held until the kernel has the answer (Flush). A full submission queue is flushed first; an
  // error here leaves the request unanswered, which the stall checks report.
  (void)Queue(e, kFuseUringCmdCommitAndFetch);
  ++unsubmitted_commits_;
  return true;
}

}  // namespace stagehand::session
