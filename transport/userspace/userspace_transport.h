#pragma once

// The userspace transport: one session process per volume (libiscsi -> FUSE file), and a loop
// device with direct I/O over the file. Session processes outlive the agent (transient systemd
// units, or detached children), so the agent can crash, be killed or be upgraded without
// breaking I/O.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/process.h"
#include "transport/transport.h"
#include "transport/userspace/session_launcher.h"
#include "transport/userspace/session_worker.h"
#include "transport/userspace/stall_detector.h"

namespace stagehand::transport::userspace {

struct UserspaceTransportOptions {
  // The session binary, run as `<binary> __session` (default: `stagehand-session` next to the
  // running binary if present, else the running binary itself).
  std::string binary;
  // The full command instead of `<binary> __session` (a relocated bundle, see session_bundle.h).
  std::vector<std::string> command;
  // Who starts session processes (default: detached children).
  std::shared_ptr<SessionLauncher> launcher;
  std::chrono::seconds start_timeout{30};
  std::chrono::seconds stop_timeout{10};
  // Requests waiting on the session's loop device with none completed for this long, while its
  // process runs and says UP, make it SessionNotAnswering (deadlocked, frozen).
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(30)};
  // A session whose loop (which turns at least once a second) has not turned for this long,
  // while its process runs and says UP, is SessionNotAnswering whether or not I/O waits on it.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
  // A session process that sends no watchdog ping for this long (stopped, deadlocked: its loop
  // pings every second) is killed by its manager and replaced; 0: never.
  std::chrono::seconds session_watchdog{30};
  // New sessions ask for FUSE over io_uring.
  bool fuse_io_uring = false;
  // Where the runtime directories of sessions are (<runtime-dir>/sessions): Sessions() lists it.
  std::string sessions_dir;
};

// Its name, and the name of its kind of session record.
inline constexpr char kName[] = "userspace";

class UserspaceTransport : public Transport {
 public:
  explicit UserspaceTransport(UserspaceTransportOptions options);

  std::string_view Name() const override { return kName; }

  // `stagehand-session` next to the running binary if present, else the running binary.
  static std::string DefaultBinary();

  void Prepare(const AttachRequest& request, state::v1::SessionRecord* session) override;
  absl::StatusOr<Attachment> Attach(const AttachRequest& request) override;
  absl::Status Detach(const state::v1::SessionRecord& session) override;
  absl::StatusOr<uint64_t> RefreshCapacity(const state::v1::SessionRecord& session) override;
  SessionHealth Health(const state::v1::SessionRecord& session) override;
  SessionDescription Describe(const state::v1::SessionRecord& session) override;
  absl::StatusOr<std::optional<state::v1::SessionRecord>> Upgrade(
      const state::v1::SessionRecord& session) override;
  // A process of this build takes the volume over (as Upgrade does) and claims the LUN before
  // it serves, or serves without the claim and gives it up; the one serving now serves on if
  // it fails.
  absl::StatusOr<WriterChange> SetWriter(const state::v1::SessionRecord& session,
                                         const AttachRequest& request) override;
  // From the status and counters files of every runtime directory in `sessions_dir`.
  std::vector<SessionSample> Sessions() override;

  // The build of the session binary this transport starts (GNU build ID; empty if unknown).
  const std::string& session_build() const { return session_build_; }

  // Runs the session command with --probe (session/protocol.h): FailedPrecondition, saying what
  // it did instead, when it does not run as a stagehand session (a binary replaced by a broken
  // one, a missing library). New stages would fail, and so would restarts under systemd.
  absl::Status ProbeSessionCommand() const;

 private:
  // Health once the process serving `session` (`pid`) has ended; `last` is its status file.
  SessionHealth Ended(const state::v1::UserspaceSessionRecord& session,
                      const std::optional<state::v1::SessionStatus>& last, int pid);
  // Whether the running process still answers (heartbeat, I/O completing); changes a healthy
  // `h`.
  void CheckAnswering(const state::v1::UserspaceSessionRecord& session, int pid, SessionHealth& h);
  // Whether a keeper still stands behind the running process; changes a healthy `h`.
  static void CheckSupervised(const state::v1::SessionStatus& status, int pid, SessionHealth& h);
  // Starts a session process with `config` and reads its first status; fills in `record`'s
  // unit (under systemd) from its runtime dir and generation.
  absl::StatusOr<state::v1::SessionStatus> Launch(state::v1::SessionConfig config,
                                                  const std::string& description,
                                                  state::v1::UserspaceSessionRecord* record);

  // Hands the volume of `session` (served by `worker` now) to a new process started with
  // `config` (take_over set) and returns its first status; `session` becomes the new
  // process's record. On failure the old process serves on, and the new one is gone (the
  // failure carries the holder's key where a claim was refused).
  absl::StatusOr<state::v1::SessionStatus> Replace(state::v1::UserspaceSessionRecord& session,
                                                   const Worker& worker,
                                                   const state::v1::SessionConfig& config,
                                                   const std::string& description);

  UserspaceTransportOptions options_;
  std::string session_build_;
  StallDetector stalls_;
};

}  // namespace stagehand::transport::userspace
