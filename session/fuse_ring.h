#pragma once

// FUSE over io_uring (Linux 6.14, protocol 7.42, when /sys/module/fuse/parameters/enable_uring
// is set): after INIT, the server registers ring entries with the kernel, one set per queue
// (the kernel has a queue per possible CPU and delivers a request to the queue of the CPU it
// was issued on). Each entry is a header buffer and a payload buffer; a request arrives as the
// completion of the entry's command, and the answer goes back in the same buffers with a
// commit-and-fetch command that also re-arms the entry: no read(2) or write(2) per request,
// and the commits of one turn of the server's loop go to the kernel in one system call.
//
// What still goes through /dev/fuse: INIT (before the ring exists), FORGET and INTERRUPT, and
// every notification the server sends.
//
// Thread-compatible: one owner thread (the server's), which submits and reaps for all queues.

#include <linux/fuse.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace stagehand::session {

// The ring's part of the protocol (7.42), newer than Debian 12's <linux/fuse.h>.
inline constexpr uint32_t kFuseUringCmdRegister = 1;
inline constexpr uint32_t kFuseUringCmdCommitAndFetch = 2;

struct FuseUringEntInOut {
  uint64_t flags;
  uint64_t commit_id;   // The request's, for its commit.
  uint32_t payload_sz;  // Bytes in the payload buffer (both ways).
  uint32_t padding;
  uint64_t reserved;
};

struct FuseUringReqHeader {
  uint8_t in_out[128];  // struct fuse_in_header, or the reply's struct fuse_out_header.
  uint8_t op_in[128];   // The request's per-opcode header (struct fuse_read_in, ...).
  FuseUringEntInOut ring_ent_in_out;
};

struct FuseUringCmdReq {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};

static_assert(sizeof(FuseUringReqHeader) == 288);
static_assert(sizeof(FuseUringCmdReq) == 24);

// A request as the ring delivered it.
struct FuseRingRequest {
  const fuse_in_header* header;
  std::span<const uint8_t> op_in;    // The per-opcode header (its 128 bytes; the struct's size
                                     // is the opcode's).
  std::span<const uint8_t> payload;  // What follows it: a write's data, a lookup's name.
  // The entry's whole payload buffer: it lives until the request is answered, and a reply
  // written into it in place is not copied again.
  std::span<uint8_t> reply_buffer;
};

class FuseRing {
 public:
  struct Options {
    unsigned queues = 0;       // The kernel's: one per possible CPU. 0: get_nprocs_conf().
    unsigned depth = 16;       // Entries per queue: requests in flight per queue.
    size_t payload_bytes = 0;  // At least max(8 KiB, max_write, max_pages * page size).
    // Kept at the number of requests taken and not yet answered to the kernel (a field of the
    // counters file, written with relaxed atomic stores), so that what a process that dies
    // holds can be told afterwards; may be null.
    uint64_t* held = nullptr;
  };

  // Sets up an io_uring on `fuse_fd` (a /dev/fuse whose INIT was answered with
  // FUSE_OVER_IO_URING) and registers every entry. Unavailable when the kernel refuses (the
  // module parameter is off, or io_uring is not allowed): the caller serves /dev/fuse alone.
  static absl::StatusOr<std::unique_ptr<FuseRing>> Start(int fuse_fd, const Options& options);

  FuseRing(const FuseRing&) = delete;
  FuseRing& operator=(const FuseRing&) = delete;
  // Tears the io_uring down: the kernel cancels the entries that wait for requests.
  ~FuseRing();

  // Readable (POLLIN) when requests wait.
  int Fd() const;

  // Calls `dispatch` for every request that has arrived. Aborted once the connection has ended.
  template <typename Dispatch>
  absl::Status Harvest(Dispatch&& dispatch) {
    Entry* entry = nullptr;
    while (true) {
      SH_ASSIGN_OR_RETURN(entry, NextRequest());
      if (entry == nullptr) {
        return absl::OkStatus();
      }
      dispatch(RequestOf(*entry));
    }
  }

  // Answers `unique` if it came through the ring (false otherwise): the reply goes into the
  // entry's buffers and its commit-and-fetch is queued for Flush(). `error` is 0 or a positive
  // errno; the payload pieces are copied, and ignored when `error` is not 0.
  bool Reply(uint64_t unique, int error, std::initializer_list<std::span<const uint8_t>> payload);

  // Hands the queued commits to the kernel (one system call). Aborted once the connection has
  // ended.
  absl::Status Flush();

  unsigned queues() const { return queues_; }

 private:
  struct Entry {
    uint16_t qid = 0;
    uint64_t commit_id = 0;
    std::unique_ptr<FuseUringReqHeader> header;
    std::unique_ptr<uint8_t[]> payload;
    size_t payload_bytes = 0;
    std::array<iovec, 2> iov{};
  };
  struct Ring;

  FuseRing() = default;

  // The next entry that holds a request; nullptr when none waits.
  absl::StatusOr<Entry*> NextRequest();
  static FuseRingRequest RequestOf(const Entry& entry);
  // Queues the entry's command (REGISTER or COMMIT_AND_FETCH).
  absl::Status Queue(Entry& entry, uint32_t cmd);
  // Writes the count of requests held to options' `held`.
  void PublishHeld() const;

  int fuse_fd_ = -1;
  unsigned queues_ = 0;
  std::unique_ptr<Ring> ring_;
  std::vector<Entry> entries_;
  std::unordered_map<uint64_t, Entry*> in_userspace_;  // By request unique.
  unsigned queued_ = 0;                                // Commands not yet submitted.
  unsigned unsubmitted_commits_ = 0;  // Answers queued, not yet handed to the kernel.
  uint64_t* held_ = nullptr;
};

}  // namespace stagehand::session
