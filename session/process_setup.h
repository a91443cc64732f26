#pragma once

// What a session process does to itself as it starts: it keeps out of memory reclaim (it serves
// the writeback of its own loop device), and points the pipes it was started with at /dev/null
// once it is done with them.

namespace stagehand::session {

// What KeepOutOfReclaim got.
struct ReclaimGuard {
  bool io_flusher = false;     // PR_SET_IO_FLUSHER took (needs CAP_SYS_RESOURCE).
  bool memory_locked = false;  // mlockall took.
};

// The session process is in the writeback path of its own loop device: if it waits on reclaim
// that waits on that writeback (a page fault, an allocation under memory pressure), nothing
// moves again. PR_SET_IO_FLUSHER makes its allocations never wait on I/O (as NBD and FUSE
// block servers do; it needs CAP_SYS_RESOURCE, which a privileged pod and a systemd service
// have); mlockall keeps its code and buffers resident, so serving never faults (root may lock
// memory). Both are per process and apply to everything allocated afterwards.
ReclaimGuard KeepOutOfReclaim();

// Points `fd` at /dev/null: the pipe behind it is closed, and the descriptor number (0 or 1) stays
// taken, so nothing opened later lands on stdin/stdout by accident.
void ReplaceWithDevNull(int fd);

}  // namespace stagehand::session
