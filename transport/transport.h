#pragma once

// The seam between the built-in driver and whatever turns a volume's target into a local block
// device. A transport speaks one protocol (iSCSI today) and keeps what it needs to undo, check
// and describe an attachment in its kind of session record (transport/session_record.h).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "health/reason.h"
#include "iscsi/lun_capacity.h"
#include "iscsi/lun_identity.h"
#include "iscsi/target_spec.h"
#include "proto/state.pb.h"

namespace stagehand::transport {

// A volume's target, one alternative per protocol; a transport refuses the protocols it does
// not speak (InvalidArgument).
using Target = std::variant<iscsi::TargetSpec>;

// What a logical unit says it is, as its protocol reports it, one alternative per protocol.
using Identity = std::variant<iscsi::LunIdentity>;

struct AttachRequest {
  Target target;
  // The transport to use (Registry: "" is the node's default).
  std::string transport;
  std::string initiator_name;
  std::string runtime_dir;  // Private to this volume; created by the transport.
  std::string volume_id;    // For the session's status and metrics (not a secret).
  // The volume is staged for reading only (a reader-only access mode): a transport that can
  // expose the LUN read-only (the userspace transport's loop device) does so.
  bool read_only = false;
  // Seconds I/O waits for a lost connection before it fails with EIO (reconnects go on).
  uint32_t replacement_timeout_seconds = 120;
  // Non-zero: reserve the LUN for this node's writes under this key (a SCSI-3 persistent
  // reservation, iscsi/reservation_claim.h) before the LUN is exposed, and keep it on every
  // new login; the attach fails with Unavailable while another node holds it (the holder's
  // key as iscsi::kHolderKeyPayload). The userspace transport in its session process, the kernel
  // transport on every path's disk (renewed by the agent).
  uint64_t reservation_key = 0;
  // How often the registration moves to a fresh key (seconds; 0: never): a third of the
  // takeover time.
  uint32_t reservation_renew_seconds = 0;
  // Another node's key seen holding the LUN unchanged for the takeover time: preempted if it
  // still holds it, and every key of its node is still `takeover_node_keys` (their digest,
  // iscsi::NodeKeysDigest; 0: unchecked). 0: none.
  uint64_t takeover_key = 0;
  uint64_t takeover_node_keys = 0;
  // A target without persistent reservations serves the volume without one (takeoverAfter
  // "off"); otherwise such a target fails the attach (FailedPrecondition).
  bool reservation_optional = false;
  // Called once with the LUN's identity as soon as it is read, before the LUN is exposed as a
  // block device, and with the session record as it stands then (what Detach needs to undo the
  // attach so far, the identity it must find before it deletes a disk included): the caller
  // persists both before it accepts. An error fails the attach with that status, and the
  // transport undoes only what this attach made (never a session or device that was there
  // before).
  std::function<absl::Status(const Identity&, const state::v1::SessionRecord& so_far)> vet_identity;
};

struct Attachment {
  std::string device;  // "/dev/loop3", "/dev/sdb", "/dev/mapper/3600…"
  Identity identity;
  iscsi::LunCapacity capacity;
  state::v1::SessionRecord session;  // What Detach and Health need, to be persisted.
  // The key of another node's reservation that the attach preempted (AttachRequest::
  // takeover_key, when that node still held the LUN); 0: none.
  uint64_t took_over_from = 0;
};

// What Transport::SetWriter changed.
struct WriterChange {
  state::v1::SessionRecord session;  // To be persisted.
  // The key of another node's reservation that the claim preempted (AttachRequest::
  // takeover_key); 0: none.
  uint64_t took_over_from = 0;
};

struct SessionHealth {
  // The problem (health/reason.h); nullopt when there is none.
  std::optional<health::Reason> reason;
  // What happened and what to do, for a person; empty without a problem.
  std::string message;

  // No problem, or a degraded one (fewer paths than portals, a loop device detaching): I/O works.
  bool Usable() const {
    return !reason || health::Info(*reason).severity == health::Severity::kDegraded;
  }
};

// What serves a session now, for people (stagehandctl agent volumes).
struct SessionDescription {
  std::string transport;  // Its transport's name.
  int pid = 0;            // The process serving it; 0 when none (or the kernel).
  std::string build;      // Its build (GNU build ID).
  bool outdated = false;  // Another build than the transport's own.
  std::string fuse_mode;  // "classic" or "io_uring"; empty for the kernel.
  // Marked PR_SET_IO_FLUSHER (its allocations never wait on writeback, which may be its own).
  bool io_flusher = false;
  // Its registration on the LUN now (a persistent reservation for this node's writes); 0 when
  // the volume is not reserved.
  uint64_t reservation_key = 0;
  // A single-node volume served without a reservation (the target has none; takeoverAfter off).
  bool unreserved = false;
};

// A session as metrics show it, from what the transport keeps beside it (never I/O to the LUN).
struct SessionSample {
  std::string transport;
  std::string volume_id;
  // The session's state as its process last wrote it: "UP", "RECONNECTING", "STARTING",
  // "IDENTITY_MISMATCH", "FAILED", "CAPACITY_SHRUNK", "FUSE_ABORTED", "FENCED".
  std::string state;
  uint64_t reconnects = 0;
  // When the process serving it started, in seconds since the epoch, where the transport has
  // one: a successor (a restart, an upgrade in place) moves it.
  std::optional<double> process_started;

  // The data path's counters since its process started, where the transport counts them.
  struct Counters {
    uint64_t read_ops = 0;
    uint64_t read_bytes = 0;
    uint64_t write_ops = 0;
    uint64_t write_bytes = 0;
    uint64_t flush_ops = 0;
    uint64_t io_errors = 0;  // Requests answered with EIO after retries.
  };

  std::optional<Counters> counters;
};

// Thread-safe: the node service calls it from its gRPC threads, for different volumes at once
// (never two calls for the same volume: the node service holds that volume's lock). The
// userspace transport keeps no shared state (each session is its own process); the kernel
// transport serialises attach, detach and capacity refresh internally.
class Transport {
 public:
  virtual ~Transport() = default;

  // The transport's name ("userspace", "kernel"): what a volume context's `transport` says, and
  // the name of its kind of session record.
  virtual std::string_view Name() const = 0;

  // Fills in, before any side effect, what Detach needs to undo an Attach of `request` that was
  // cut short (a crash half-way): the record is persisted, then Attach runs.
  virtual void Prepare(const AttachRequest& request, state::v1::SessionRecord* session) = 0;

  // Logs in, checks the LUN identity against the request, and exposes the LUN as a block device.
  // Leaves nothing behind on failure. Unauthenticated (CHAP), NotFound (target/LUN),
  // Unavailable (portal), FailedPrecondition (identity mismatch), InvalidArgument (a target of
  // a protocol it does not speak).
  virtual absl::StatusOr<Attachment> Attach(const AttachRequest& request) = 0;

  // Removes the block device and ends the session. Idempotent: OK when already gone.
  virtual absl::Status Detach(const state::v1::SessionRecord& session) = 0;

  // Reads the LUN's capacity again (after the target grew it) and resizes the block device to
  // match. Returns the new size in bytes. Unavailable when the session is not running.
  virtual absl::StatusOr<uint64_t> RefreshCapacity(const state::v1::SessionRecord& session) = 0;

  // Reports whether the session is alive and still talking to the same LUN.
  virtual SessionHealth Health(const state::v1::SessionRecord& session) = 0;

  // What serves the session now.
  virtual SessionDescription Describe(const state::v1::SessionRecord& session) {
    (void)session;
    return {};
  }

  // Takes up, after an agent (re)start, what the transport does for a staged session in the
  // background (the kernel transport's renewal of the LUN's reservation). Idempotent.
  virtual absl::Status Resume(const state::v1::SessionRecord& session) {
    (void)session;
    return absl::OkStatus();
  }

  // Hands the session to a process of the transport's own build when another build serves it
  // (an upgrade), leaving the mount, the device and the filesystem in place: the caller
  // persists the returned record. nullopt when there is nothing to replace; Unavailable when it
  // cannot be replaced now (reconnecting: ask again later). On failure the old process serves
  // on.
  virtual absl::StatusOr<std::optional<state::v1::SessionRecord>> Upgrade(
      const state::v1::SessionRecord& session) {
    (void)session;
    return std::nullopt;
  }

  // The writer of a multi-node single-writer volume is chosen at its publish, not its stage
  // (which reads only): with `request.reservation_key` non-zero, claims the LUN of `session`
  // for this node's writes, as Attach does for a single-node volume (the reservation fields of
  // `request`; Unavailable while another node holds it, with the holder's key as
  // iscsi::kHolderKeyPayload); with 0, gives up what this node holds. Idempotent; the volume
  // stays exposed and readable throughout, and on failure nothing changed. The caller persists
  // the returned record. Unimplemented for a transport that cannot.
  virtual absl::StatusOr<WriterChange> SetWriter(const state::v1::SessionRecord& session,
                                                 const AttachRequest& request) {
    (void)session;
    (void)request;
    return absl::UnimplementedError(
        "the " + std::string(Name()) +
        " transport cannot choose a multi-node single-writer volume's writer");
  }

  // Every session it serves on this node, for metrics. Never blocks on a session.
  virtual std::vector<SessionSample> Sessions() { return {}; }
};

}  // namespace stagehand::transport
