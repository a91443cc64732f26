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
#include "iscsi/command_queue.h"
#include "iscsi/fuse_connection.h"
#include "iscsi/io_request.h"
#include "iscsi/lun_capacity.h"

namespace stagehand::iscsi {

// The inode numbers of the filesystem.
inline constexpr uint64_t kRootInode = 1;
inline constexpr uint64_t kLunInode = 2;

class LunFile {
 public:
  // Serves `connection` (freshly mounted, or adopted from an earlier server): INIT, if it comes,
  // is answered like any request.
  LunFile(FuseConnection connection, std::string file_name, LunCapacity capacity,
          CommandQueue& queue, BufferPool& pool);
  LunFile(const LunFile&) = delete;
  LunFile& operator=(const LunFile&) = delete;
  // Closes this server's descriptor; the mount stays unless Unmount() ended it.
  ~LunFile() = default;

  // Mounts a new filesystem at `mountpoint` (an existing empty directory). Unavailable if the
  // mount fails.
  static absl::StatusOr<std::unique_ptr<LunFile>> Mount(const std::string& mountpoint,
                                                        std::string file_name, LunCapacity capacity,
                                                        CommandQueue& queue, BufferPool& pool);

  // /dev/fuse, non-blocking, for poll(2).
  int Fd() const { return connection_.Fd(); }

  // Answers every request the kernel has queued. False once the connection has ended.
  bool Serve();

  // Asks the kernel for the requests an earlier server read and never answered. OK on kernels
  // that cannot (Unimplemented is returned, for the caller to say so).
  absl::Status ResendUnanswered() { return connection_.NotifyResend(); }

  // Ends the mount (clean stop: nothing may use the file any more).
  absl::Status Unmount() { return connection_.Unmount(); }

  FuseConnection& connection() { return connection_; }

  const LunCapacity& Capacity() const { return capacity_; }

  // Takes `capacity` if the LUN grew (never shrinks under a filesystem, never another block
  // size), and drops the kernel's cached size of the file so that LOOP_SET_CAPACITY sees it.
  // True if it grew.
  bool GrowTo(const LunCapacity& capacity);

 private:
  // One request: `in` is its whole message.
  void Dispatch(std::span<const uint8_t> in);
  void Init(uint64_t unique, std::span<const uint8_t> arg);
  void Lookup(uint64_t unique, uint64_t parent, std::span<const uint8_t> arg);
  void Getattr(uint64_t unique, uint64_t ino);
  void Open(uint64_t unique, uint64_t ino);
  void Read(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg);
  void Write(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg);
  void Fsync(uint64_t unique);
  void Readdir(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg);
  void Statfs(uint64_t unique);
  void Fallocate(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg);
  void Answer(uint64_t unique, int error, std::span<const uint8_t> payload = {});

  FuseConnection connection_;
  std::string file_name_;
  LunCapacity capacity_;
  CommandQueue& queue_;
  BufferPool& pool_;
  std::unique_ptr<uint8_t[]> receive_;  // Holds the largest request.
};

}  // namespace stagehand::iscsi
