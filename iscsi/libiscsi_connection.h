#pragma once

// Synchronous libiscsi steps used to bring up a session: login, LUN identity and capacity.
// Once logged in, the session process drives the context asynchronously.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "iscsi/iscsi_handles.h"
#include "iscsi/libiscsi_step.h"
#include "iscsi/lun_capacity.h"
#include "iscsi/lun_identity.h"
#include "iscsi/persistent_reservation.h"
#include "iscsi/target_spec.h"

struct iscsi_context;

namespace stagehand::iscsi {

struct LoginParams {
  Portal portal;
  std::string iqn;
  uint32_t lun = 0;
  std::string initiator_name;
  std::optional<ChapCredentials> chap;
  int timeout_seconds = 10;
  // Called at least every 100 ms while a login or a read of this connection waits (a watchdog
  // ping: a login to a target that does not answer takes up to timeout_seconds a step).
  std::function<void()> keepalive;
};

// A logged-in libiscsi context. Destroying it logs out (best effort) and closes the socket.
// Not thread-safe: one owner thread.
class Connection : public ReservationChannel {
 public:
  // Connects, logs in (CHAP when given) and checks the LUN answers TEST UNIT READY.
  // Unauthenticated: CHAP rejected. NotFound: no such target or LUN. Unavailable: portal
  // unreachable. See MapLibiscsiError.
  static absl::StatusOr<std::unique_ptr<Connection>> Login(const LoginParams& params);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() override;

  // Reads the standard INQUIRY data, VPD 0x83 and VPD 0x80.
  absl::StatusOr<LunIdentity> ReadIdentity();

  absl::StatusOr<LunCapacity> ReadCapacity();

  // ReservationChannel, over this connection. Definitions in libiscsi_reservation.cc.
  absl::StatusOr<Reservations> ReadReservations() override;
  absl::Status ReserveOut(ReserveAction action, uint64_t key, uint64_t service_key,
                          uint8_t type) override;

  // Logs out cleanly. The destructor does this too; call it to see the result.
  absl::Status Logout();

  // Borrowed: owned by this object.
  iscsi_context* Context() const { return ctx_.get(); }

  uint32_t Lun() const { return lun_; }

  // Hands the logged-in context to the caller (this object is then empty).
  IscsiContext ReleaseContext();

 private:
  Connection(IscsiContext ctx, const LoginParams& params, std::string what)
      : ctx_(std::move(ctx)),
        lun_(params.lun),
        timeout_seconds_(params.timeout_seconds),
        keepalive_(params.keepalive),
        what_(std::move(what)) {}

  // The error of a command that did not complete with GOOD: `ran`'s, or libiscsi's.
  absl::Status Failed(const std::string& what, const absl::StatusOr<ScsiTask>& ran) const;
  // Runs one command (`start` queues it with OnTaskStep) under the login timeout.
  absl::StatusOr<ScsiTask> Run(const std::string& what,
                               const std::function<scsi_task*(TaskStep*)>& start);

  absl::StatusOr<std::vector<uint8_t>> Inquiry(bool evpd, int page);
  // The status of a persistent-reservation command that did not complete with GOOD.
  absl::Status ReservationFailed(const std::string& what,
                                 const absl::StatusOr<ScsiTask>& ran) const;
  // One PERSISTENT RESERVE IN service action, `length` bytes at most.
  absl::StatusOr<ScsiTask> ReserveIn(int action, uint16_t length);
  // Run, again while the command meets a unit attention (reported once per nexus: after a
  // preemption, a release, a reset), a few times at most.
  absl::StatusOr<ScsiTask> RunPastUnitAttentions(const std::string& what,
                                                 const std::function<scsi_task*(TaskStep*)>& start);
  // A VPD page the target may lack: nullopt when it says it has none (ILLEGAL REQUEST);
  // Unavailable when the answer did not come or was anything else.
  absl::StatusOr<std::optional<std::vector<uint8_t>>> OptionalVpdPage(int page);

  IscsiContext ctx_;
  uint32_t lun_;
  int timeout_seconds_;
  std::function<void()> keepalive_;
  std::string what_;  // "iqn… lun 1 at host:port", for messages.
  bool logged_out_ = false;
};

}  // namespace stagehand::iscsi
