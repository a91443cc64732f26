#pragma once

// open-iscsi's `iscsiadm`, run as an argv with a deadline (never through a shell), its exit codes
// mapped to absl codes, and the node records it keeps under /etc/iscsi/nodes. CHAP secrets never
// go on a command line (other users can read /proc/<pid>/cmdline): they are written into the
// node record file, mode 0600.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/subprocess.h"
#include "iscsi/target_spec.h"

namespace stagehand::transport::kernel {

// Runs a program; the seam unit tests replace. Production: RunProcess.
using CommandRunner = std::function<absl::StatusOr<ProcessResult>(const std::vector<std::string>&,
                                                                  const RunOptions&)>;

// open-iscsi's exit codes (include/iscsi_err.h) that change what stagehand does.
inline constexpr int kIscsiErrSessionNotFound = 2;
inline constexpr int kIscsiErrTransport = 4;
inline constexpr int kIscsiErrLogin = 5;
inline constexpr int kIscsiErrTransportTimeout = 8;
inline constexpr int kIscsiErrSessionExists = 15;
inline constexpr int kIscsiErrFatalLogin = 19;
inline constexpr int kIscsiErrIscsidNotConnected = 20;
inline constexpr int kIscsiErrNoObjectsFound = 21;
inline constexpr int kIscsiErrLoginAuthFailed = 24;

// Maps a finished `iscsiadm` run to a status: OK for exit 0; Unauthenticated (24: CHAP
// rejected), Unavailable (4, 8, 5: portal unreachable or login timed out; 20: iscsid not
// running), NotFound (19: the target refused the login, e.g. no such target; 2/21: no such
// session or record), Internal otherwise. `what` says what was attempted ("log in to ...").
// The message carries iscsiadm's last output line, which never holds a secret (secrets are not
// on its command line and iscsiadm does not print them).
absl::Status IscsiadmStatus(const ProcessResult& result, std::string_view what);

// What stagehand writes into a node record.
struct NodeRecordSettings {
  std::optional<iscsi::ChapCredentials> chap;  // node.session.auth.*; none: authmethod None.
  std::string initiator_name;                  // iface.initiatorname; empty: iscsid's own.
  int replacement_timeout_seconds = 0;  // node.session.timeo.replacement_timeout; 0: default.
};

// Rewrites the text of a node record (`name = value` lines as iscsiadm writes them): sets
// node.startup and node.conn[0].startup to manual (a reboot does not resurrect the session),
// node.session.scan to manual (only the LUN asked for is scanned), two login attempts (an
// unreachable portal fails within the iscsiadm deadline), the CHAP settings, initiator name and
// replacement timeout, and keeps every other line. Pure.
std::string RewriteNodeRecord(std::string_view text, const NodeRecordSettings& settings);

// The CHAP credentials a node record holds (node.session.auth.*); nullopt when its authmethod is
// not CHAP. Pure.
std::optional<iscsi::ChapCredentials> NodeRecordChap(std::string_view text);

// The file of the node record for `iqn` at `portal` under `nodes_dir` (normally
// /etc/iscsi/nodes): `<iqn>/<address>,<port>[,<tpgt>]`, a file, or a directory holding one file
// per interface (`default`). NotFound if there is none.
absl::StatusOr<std::string> FindNodeRecordFile(const std::string& nodes_dir, const std::string& iqn,
                                               const iscsi::Portal& portal);

}  // namespace stagehand::transport::kernel
