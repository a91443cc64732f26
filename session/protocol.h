#pragma once

// What a userspace session process and the agent's userspace transport agree on: the session's
// runtime directory (one per volume, mode 0700, root only; <runtime-dir>/sessions/<id>), the
// first status framed on the ready pipe, the exit statuses, and the data-path counters file.
// Both sides include this header and nothing else of the other: the session writes these files,
// the transport (and through it metrics and health) reads them.
//
//   <runtime_dir>/status         SessionStatus (proto/state.proto), replaced atomically on
//                                every state change (written to status.tmp, then renamed)
//   <runtime_dir>/counters       DataPathCounters, mapped by the session (below)
//   <runtime_dir>/mnt/           the session's private FUSE mount; mnt/lun backs the loop device
//   <runtime_dir>/handover.sock  where the session offers its volume to a successor of another
//                                build (session/handover.h)
//
// The config (with secrets) never touches this directory: it comes in a sealed memory file on the
// session's stdin, and later in a sealed memory file its manager keeps.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "proto/state.pb.h"

namespace stagehand::session {

inline constexpr char kStatusFile[] = "status";
inline constexpr char kStatusTempFile[] = "status.tmp";
inline constexpr char kCountersFile[] = "counters";
inline constexpr char kMountDir[] = "mnt";
inline constexpr char kHandoverSocket[] = "handover.sock";

// <runtime_dir>/<name>.
std::string RuntimePath(std::string_view runtime_dir, std::string_view name);

// The status file of the session in `runtime_dir`. NotFound when there is none (the session
// never started, or stopped cleanly); DataLoss when it cannot be parsed.
absl::StatusOr<state::v1::SessionStatus> ReadStatus(std::string_view runtime_dir);

// The first status travels over the ready pipe framed: a 4-byte little-endian length, then the
// serialized SessionStatus. systemd keeps its own copy of a unit's stdout for the unit's lifetime,
// so the reader cannot wait for end-of-file.
std::string FrameReadyMessage(std::string_view serialized_status);

// The serialized status once `buffer` holds a whole frame; nullopt while it does not.
std::optional<std::string> UnframeReadyMessage(std::string_view buffer);

// Exit statuses: 0 after a clean stop (SIGTERM), 1 when it could not start or take over (the
// reason is in the status written to the ready pipe), kExitFuseAborted when the kernel ended the
// FUSE connection. A manager restarts the process only when it dies of a signal or misses its
// watchdog: an exit status is the process's own decision.
inline constexpr int kExitFuseAborted = 2;

// `<session command> --probe` prints "<kProbeAnswer> <build id>" and exits 0: how the agent
// checks at start that the session binary runs at all.
inline constexpr char kProbeArgument[] = "--probe";
inline constexpr char kProbeAnswer[] = "stagehand-session";

// Set by the session keeper in the environment of the process it keeps: the keeper's pid.
inline constexpr char kKeeperVariable[] = "STAGEHAND_SESSION_KEEPER";

// `<session command> --keeper --adopt=<pid>`: a keeper that adopts the running session process
// <pid> (whose keeper died), started by that process with these descriptors: a pidfd of it,
// the write end of a pipe for the keeper's "<pid> <notification address>\n", and what a
// successor needs (the handover memory file and /dev/fuse), as if stored with FDSTORE=1.
inline constexpr char kAdoptArgument[] = "--adopt=";
inline constexpr int kAdoptPidfd = 3;
inline constexpr int kAdoptReady = 4;
inline constexpr int kAdoptHandover = 5;
inline constexpr int kAdoptFuse = 6;

// Data-path counters of a session process, in <runtime_dir>/counters (mode 0600): the session's
// I/O thread bumps them in its mapping at no syscall cost (session/counters_file.h), and the
// agent reads the file when Prometheus scrapes. Counters restart at zero with a new session
// process (Prometheus counter semantics).
//
// The same file carries the session's heartbeat: the time its loop last turned. The loop turns
// at least once a second (a timer), so a heartbeat that stops moving while the process runs means
// a session that answers nothing (deadlocked, frozen, stuck in reclaim), told without touching
// its FUSE mount.
struct DataPathCounters {
  // Layout version of this struct in the file: 1 had no heartbeat (sessions started by older
  // builds), 2 added it at the end, 3 added ring_held.
  uint64_t version = 3;
  uint64_t read_ops = 0;
  uint64_t read_bytes = 0;
  uint64_t write_ops = 0;
  uint64_t write_bytes = 0;
  uint64_t flush_ops = 0;
  uint64_t io_errors = 0;  // Requests answered with an error (EIO) after retries.
  // CLOCK_MONOTONIC, in nanoseconds, of the last turn of the session's loop; 0: unknown (not
  // started yet, or a version 1 file).
  uint64_t heartbeat_ns = 0;
  // FUSE requests the session's io_uring ring has taken and not answered yet (a gauge; 0 in
  // classic mode). What a successor finds here when its predecessor died is lost: the kernel
  // resends nothing a dead ring held.
  uint64_t ring_held = 0;
};

// CLOCK_MONOTONIC now, in nanoseconds: what the session's heartbeat writes.
uint64_t MonotonicNowNs();

// How long ago the loop last turned, as of `now_ns` (MonotonicNowNs); nullopt when unknown.
std::optional<std::chrono::milliseconds> SinceLastBeat(const DataPathCounters& counters,
                                                       uint64_t now_ns);

// The agent's side: reads a snapshot. NotFound when the file does not exist; DataLoss when it is
// too short or of an unknown layout version (a version 1 file reads with heartbeat_ns 0).
absl::StatusOr<DataPathCounters> ReadCounters(const std::string& path);

// FUSE requests lost to dead rings, as a successor of the process whose last status is `last`
// counts them: what `last`'s predecessors lost, plus what `last` held in its ring when it died
// (`counters`: its counters file, read before the successor replaces it). The kernel resends
// nothing a dead ring held (FUSE_NOTIFY_RESEND covers /dev/fuse only).
uint64_t LostRingRequests(const state::v1::SessionStatus& last,
                          const absl::StatusOr<DataPathCounters>& counters);

}  // namespace stagehand::session
