#pragma once

// A private tgtd (Debian's `tgt`) on 127.0.0.1 for integration tests: its own iSCSI port and
// control port, file-backed LUNs in a temp dir. Stopped (SIGKILL) and cleaned up on destruction.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand::testbed {

class Tgtd {
 public:
  Tgtd() = default;
  Tgtd(const Tgtd&) = delete;
  Tgtd& operator=(const Tgtd&) = delete;
  ~Tgtd();

  // Starts tgtd and waits until its control socket answers. `port` 0 picks a free port.
  absl::Status Start(uint16_t port = 0);
  // Kills tgtd (SIGKILL) and waits for it to exit. Target configuration is lost.
  void Kill();
  // Kill + Start on the same ports and re-applies every target/LUN/account created so far.
  absl::Status Restart();
  // Kill + Start on the same ports with an empty configuration (everything is forgotten).
  absl::Status RestartEmpty();

  absl::Status AddTarget(int tid, const std::string& iqn);
  absl::Status AddLun(int tid, int lun, const std::string& backing_file);
  absl::Status RemoveLun(int tid, int lun);
  // Sets the LUN's unit serial number (VPD 0x80), as another LUN behind the same name would have.
  absl::Status SetLunSerial(int tid, int lun, const std::string& serial);
  // Adds a target and LUN that only become reachable once everything is set: the initiator
  // binding comes last. Used to swap in a different LUN under the same name and number.
  absl::Status AddTargetWithSerial(int tid, const std::string& iqn, int lun,
                                   const std::string& backing_file, const std::string& serial);
  // Deletes the target (forcibly) and forgets its configuration.
  absl::Status DeleteTarget(int tid);
  // Restricts the target to CHAP: creates the account and binds it (one-way).
  absl::Status RequireChap(int tid, const std::string& user, const std::string& password);
  // tgtd's defaults (8 KiB data segments, a 64 KiB first burst) cap large writes; these raise
  // them to 256 KiB segments and 1 MiB bursts.
  absl::Status Tune(int tid);

  uint16_t port() const { return port_; }

  std::string portal() const;

  pid_t pid() const { return pid_; }

 private:
  // Runs tgtadm; with `tid` >= 0 the command is remembered for Restart().
  absl::Status Adm(std::vector<std::string> args, int tid = -1);
  absl::Status WaitForControlSocket();

  pid_t pid_ = -1;
  uint16_t port_ = 0;
  int control_port_ = 0;
  std::vector<std::pair<int, std::vector<std::string>>> applied_;  // Replayed by Restart().
};

// A free TCP port on 127.0.0.1 (bound and released; a small race is acceptable in tests).
uint16_t FreeTcpPort();

}  // namespace stagehand::testbed
