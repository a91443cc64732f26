#pragma once

// A TCP proxy between an initiator and the test's tgtd on 127.0.0.1 that injects connection
// faults: it can drop every live connection, and drop a connection at the moment the initiator
// sends a given SCSI command (it reads the iSCSI PDU headers of the initiator's stream). One
// thread; stopped and every connection closed on destruction.

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand::testing {

class IscsiProxy {
 public:
  IscsiProxy() = default;
  IscsiProxy(const IscsiProxy&) = delete;
  IscsiProxy& operator=(const IscsiProxy&) = delete;
  ~IscsiProxy();

  // Listens on a free port of 127.0.0.1 and forwards to 127.0.0.1:`target_port`.
  absl::Status Start(uint16_t target_port);

  // "127.0.0.1:<port>".
  std::string portal() const;

  // Closes every connection now (both sides), as a network failure would.
  void DropAll();

  // On the next connection accepted from now on, the first INQUIRY for VPD page `page` is not
  // forwarded: that connection is closed instead (a drop during a login's identity read).
  // Once; connections open already are not affected.
  void DropAtVpdInquiryOfNextConnection(uint8_t page);

  // While on, SCSI commands from the initiator are swallowed (never forwarded, never answered)
  // and everything else (login, NOP-Out) passes: a target whose backing store hangs.
  void SwallowScsiCommands(bool on) { swallow_commands_ = on; }

  // While on, PERSISTENT RESERVE IN/OUT commands reach the target with an opcode it does not
  // know, so that it answers ILLEGAL REQUEST: a target without persistent reservations.
  void HidePersistentReservations(bool on) { hide_reservations_ = on; }

  // Connections accepted so far.
  int connections() const { return connections_.load(); }

 private:
  void Loop();

  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: stop, drop.
  uint16_t port_ = 0;
  uint16_t target_port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> drop_all_{false};
  std::atomic<int> drop_vpd_page_{-1};
  std::atomic<int> drop_from_connection_{0};  // Connection number the drop applies from.
  std::atomic<int> connections_{0};
  std::atomic<bool> swallow_commands_{false};
  std::atomic<bool> hide_reservations_{false};
  std::thread thread_;
};

}  // namespace stagehand::testing
