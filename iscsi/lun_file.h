#pragma once

// The FUSE side of a FuseLunServer: a filesystem with one file, the LUN, whose reads, writes and
// fsyncs become IoRequests for the CommandQueue. Single-threaded: the server's thread.

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "iscsi/command_queue.h"
#include "iscsi/io_request.h"
#include "iscsi/lun_capacity.h"

struct fuse_session;
struct fuse_buf;

namespace stagehand::iscsi {

class LunFile {
 public:
  // Mounts the filesystem at `mountpoint` (an existing empty directory). Internal/Unavailable
  // if the mount fails.
  static absl::StatusOr<std::unique_ptr<LunFile>> Mount(const std::string& mountpoint,
                                                        std::string file_name, LunCapacity capacity,
                                                        CommandQueue& queue, BufferPool& pool);
  LunFile(const LunFile&) = delete;
  LunFile& operator=(const LunFile&) = delete;
  // Unmounts.
  ~LunFile();

  // /dev/fuse, non-blocking, for poll(2).
  int Fd() const;
  // Answers every request the kernel has queued. False once the mount is gone.
  bool Serve();

  const LunCapacity& Capacity() const { return capacity_; }

  // Takes `capacity` if the LUN grew (never shrinks under a filesystem, never another block
  // size), and drops the kernel's cached size of the file so that LOOP_SET_CAPACITY sees it.
  // True if it grew.
  bool GrowTo(const LunCapacity& capacity);

 private:
  struct Ops;
  LunFile(std::string file_name, LunCapacity capacity, CommandQueue& queue, BufferPool& pool);

  std::string file_name_;
  LunCapacity capacity_;
  CommandQueue& queue_;
  BufferPool& pool_;
  fuse_session* session_ = nullptr;
  bool mounted_ = false;
  std::unique_ptr<fuse_buf> buf_;  // libfuse's receive buffer, reused.
};

}  // namespace stagehand::iscsi
