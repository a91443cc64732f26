#include "session/io_request.h"

#include <linux/fuse.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "session/fuse_connection.h"

namespace stagehand::session {

std::unique_ptr<uint8_t[]> BufferPool::Take(size_t bytes, size_t* size) {
  *size = std::max(bytes, kBufferBytes);
  if (*size == kBufferBytes && !spares_.empty()) {
    std::unique_ptr<uint8_t[]> buffer = std::move(spares_.back());
    spares_.pop_back();
    return buffer;
  }
  return std::unique_ptr<uint8_t[]>(new uint8_t[*size]);
}

void BufferPool::Reserve(size_t n) {
  while (spares_.size() < std::min(n, kMaxSpare)) {
    auto buffer = std::unique_ptr<uint8_t[]>(new uint8_t[kBufferBytes]);
    std::memset(buffer.get(), 0, kBufferBytes);  // Touched: resident (and locked, when locked).
    spares_.push_back(std::move(buffer));
  }
}

void BufferPool::Give(std::unique_ptr<uint8_t[]> buffer, size_t size) {
  if (buffer != nullptr && size == kBufferBytes && spares_.size() < kMaxSpare) {
    spares_.push_back(std::move(buffer));
  }
}

IoRequest::~IoRequest() {
  if (pool != nullptr) {
    pool->Give(std::move(buffer), buffer_size);
  }
}

void IoRequest::AllocateBuffer(BufferPool& from, size_t bytes) {
  pool = &from;
  buffer = from.Take(bytes, &buffer_size);
}

void IoRequest::Reply(const scsi_task& task, DataPathCounters* counters) const {
  if (flush) {
    CountAdd(counters, &DataPathCounters::flush_ops, 1);
    (void)fuse->Reply(unique, 0);
  } else if (write) {
    CountAdd(counters, &DataPathCounters::write_ops, 1);
    CountAdd(counters, &DataPathCounters::write_bytes, slice_length);
    fuse_write_out out{};
    out.size = static_cast<uint32_t>(slice_length);
    (void)fuse->Reply(unique, 0, {BytesOf(out)});
  } else {
    // A short read would leave stale bytes in the buffer.
    if (task.residual_status == SCSI_RESIDUAL_UNDERFLOW && task.residual > 0) {
      Fail(EIO, counters);
      return;
    }
    CountAdd(counters, &DataPathCounters::read_ops, 1);
    CountAdd(counters, &DataPathCounters::read_bytes, slice_length);
    (void)fuse->Reply(unique, 0, {std::span<const uint8_t>(Data() + slice_offset, slice_length)});
  }
}

void IoRequest::Fail(int error, DataPathCounters* counters) const {
  CountAdd(counters, &DataPathCounters::io_errors, 1);
  (void)fuse->Reply(unique, error);
}

}  // namespace stagehand::session
