#pragma once

// The FUSE side of a FuseLunServer: a filesystem with one file, the LUN, whose reads, writes and
// fsyncs become IoRequests for the CommandQueue. It answers the kernel's FUSE protocol itself
// (fuse_connection.h), so it can serve a connection that an earlier process mounted and
// initialized. Single-threaded: the server's thread.

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "iscsi/lun_capacity.h"
#include "session/command_queue.h"
#include "session/fuse_connection.h"
#include "session/io_request.h"

namespace stagehand::session {

// The inode numbers of the filesystem.
inline constexpr uint64_t kRootInode = 1;
inline constexpr uint64_t kLunInode = 2;

class LunFile {
 public:
  // Serves `connection` (freshly mounted, or adopted from an earlier server): INIT, if it comes,
  // is answered like any request.
  LunFile(FuseConnection connection, std::string file_name, iscsi::LunCapacity capacity,
          CommandQueue& queue, BufferPool& pool);
  LunFile(const LunFile&) = delete;
  LunFile& operator=(const LunFile&) = delete;
  // Closes this server's descriptor; the mount stays unless Unmount() ended it.
  ~LunFile() = default;

  // Mounts a new filesystem at `mountpoint` (an existing empty directory). Unavailable if the
  // mount fails.
  static absl::StatusOr<std::unique_ptr<LunFile>> Mount(const std::string& mountpoint,
                                                        std::string file_name,
                                                        iscsi::LunCapacity capacity,
                                                        CommandQueue& queue, BufferPool& pool);

  // /dev/fuse, non-blocking, for poll(2).
  int Fd() const { return connection_.Fd(); }

  // Answers every request the kernel has queued. False once the connection has ended.
  bool Serve();

  // Asks for FUSE over io_uring at INIT, and starts it once the kernel grants it (it offers it
  // only with the module parameter fuse.enable_uring set); the classic loop otherwise.
  void WantRing(bool want) { want_ring_ = want; }

  // Where a ring keeps the count of requests it holds (FuseRing::Options::held); may be null.
  void CountRingHeldIn(uint64_t* held) { ring_held_ = held; }

  // Starts the ring on an adopted connection whose earlier server ran one (no INIT comes).
  absl::Status StartRing();

  // The ring's descriptor for poll(2) (readable when requests wait); -1 without a ring.
  int RingFd() const;

  // Answers every request the ring has delivered. False once the connection has ended.
  bool ServeRing();

  // Hands the replies of this turn to the kernel (the ring's commits; nothing in the classic
  // loop, which writes each reply at once).
  void Flush() { (void)connection_.Flush(); }

  // "io_uring" once the ring serves, else "classic"; why not, when asked for and refused.
  std::string FuseMode() const;

  const std::string& RingRefusal() const { return ring_refusal_; }

  // Asks the kernel for the requests an earlier server read and never answered. OK on kernels
  // that cannot (Unimplemented is returned, for the caller to say so).
  absl::Status ResendUnanswered() { return connection_.NotifyResend(); }

  // Ends the mount (clean stop: nothing may use the file any more).
  absl::Status Unmount() { return connection_.Unmount(); }

  FuseConnection& connection() { return connection_; }

  const iscsi::LunCapacity& Capacity() const { return capacity_; }

  // Takes `capacity` if the LUN grew (never shrinks under a filesystem, never another block
  // size), and drops the kernel's cached size of the file so that LOOP_SET_CAPACITY sees it.
  // True if it grew.
  bool GrowTo(const iscsi::LunCapacity& capacity);

 private:
  // One request read from /dev/fuse: `in` is its whole message.
  void Dispatch(std::span<const uint8_t> in);
  // One request: its header, the opcode's arguments, and what follows them (a write's data).
  // `ring_buffer`: the ring entry's payload buffer (empty for /dev/fuse requests).
  void Handle(const fuse_in_header& header, std::span<const uint8_t> arg,
              std::span<const uint8_t> data, std::span<uint8_t> ring_buffer = {});
  void Init(uint64_t unique, std::span<const uint8_t> arg);
  void Lookup(uint64_t unique, uint64_t parent, std::span<const uint8_t> arg);
  void Getattr(uint64_t unique, uint64_t ino);
  void Open(uint64_t unique, uint64_t ino);
  void Read(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg,
            std::span<uint8_t> ring_buffer);
  void Write(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg,
             std::span<const uint8_t> data, bool data_stays);
  void Fsync(uint64_t unique);
  void Readdir(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg);
  void Statfs(uint64_t unique);
  void Fallocate(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg);
  void Answer(uint64_t unique, int error, std::span<const uint8_t> payload = {});

  FuseConnection connection_;
  std::string file_name_;
  iscsi::LunCapacity capacity_;
  CommandQueue& queue_;
  BufferPool& pool_;
  std::unique_ptr<uint8_t[]> receive_;  // Holds the largest request.
  bool want_ring_ = false;
  uint64_t* ring_held_ = nullptr;
  std::string ring_refusal_;
};

}  // namespace stagehand::session
