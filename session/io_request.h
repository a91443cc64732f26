#pragma once

// One FUSE read, write or flush on its way through iSCSI, and the pool its buffers come from.
// Everything here lives on the FuseLunServer's one thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "iscsi/iscsi_handles.h"
#include "session/counters_file.h"

namespace stagehand::session {

class FuseConnection;

// The kernel splits larger I/O into FUSE requests of at most this size and sends them all at
// once, so the target works on one piece while the next is copied and on the wire (1 MiB
// sequential writes at queue depth 1 gained a quarter; see bench/README.md). It matches the
// burst sizes tuned targets take as immediate data.
inline constexpr unsigned kMaxRequestBytes = 256 * 1024;

// Free I/O buffers kept for reuse: fresh memory costs a page fault per page, which in a VM is
// more than the copy itself.
class BufferPool {
 public:
  // Big enough for any request the kernel sends (blocks covering kMaxRequestBytes) for block
  // sizes up to 64 KiB.
  static constexpr size_t kBufferBytes = kMaxRequestBytes + 2 * 64 * 1024;
  // At most this many stay allocated while idle.
  static constexpr size_t kMaxSpare = 16;

  // A buffer of at least `bytes` (and at least kBufferBytes); its size in `*size`. Not zeroed:
  // every byte a request uses is written before it is read.
  std::unique_ptr<uint8_t[]> Take(size_t bytes, size_t* size);
  // Allocates up to `n` (at most kMaxSpare) spare buffers now, with their pages in memory: a
  // process in the writeback path of its own device should not need new memory to serve it.
  void Reserve(size_t n);
  // Keeps buffers of kBufferBytes for the next Take (up to kMaxSpare); frees the others.
  void Give(std::unique_ptr<uint8_t[]> buffer, size_t size);

  // Buffers kept for reuse.
  size_t spares() const { return spares_.size(); }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> spares_;  // Each kBufferBytes.
};

class CommandQueue;

// Owned by the libiscsi task's private data while in flight, by a queue while it waits.
struct IoRequest {
  FuseConnection* fuse = nullptr;  // Where the answer goes.
  uint64_t unique = 0;             // The FUSE request it answers.
  bool write = false;
  bool flush = false;
  uint64_t lba = 0;
  uint64_t blocks = 0;
  size_t slice_offset = 0;  // Reads: where the requested bytes start in `buffer`.
  size_t slice_length = 0;  // Reads: requested bytes; writes: bytes acknowledged.
  // Reads: the whole blocks covering the request, libiscsi puts the data-in here directly;
  // writes: the payload, copied out of the receive buffer (reused by the next request).
  std::unique_ptr<uint8_t[]> buffer;
  size_t buffer_size = 0;
  // Instead of `buffer`: memory the request does not own that lives until it is answered (the
  // payload buffer of the FUSE ring entry that holds the request).
  uint8_t* borrowed = nullptr;
  scsi_iovec iov{};  // Reads: points into `buffer` (lives as long as the task).
  int retries = 0;
  // When it first had to wait for a connection (zero: never): a request waits at most the
  // replacement timeout in all, even when logins succeed and the connection drops again.
  std::chrono::steady_clock::time_point parked_at{};
  std::chrono::steady_clock::time_point sent_at{};  // When it was last sent to the target.
  BufferPool* pool = nullptr;                       // Where `buffer` goes back to.
  CommandQueue* queue = nullptr;  // Set while in flight: whose completion callback runs.

  IoRequest() = default;
  IoRequest(const IoRequest&) = delete;
  IoRequest& operator=(const IoRequest&) = delete;
  ~IoRequest();

  uint8_t* Data() const { return borrowed != nullptr ? borrowed : buffer.get(); }

  // Takes a buffer of at least `bytes` from `pool`.
  void AllocateBuffer(BufferPool& from, size_t bytes);

  // Answers the kernel: the data read (a short read is an EIO), the bytes written, or the flush.
  void Reply(const scsi_task& task, DataPathCounters* counters) const;
  // Answers the kernel with `error` (an errno) and counts an I/O error.
  void Fail(int error, DataPathCounters* counters) const;
};

}  // namespace stagehand::session
