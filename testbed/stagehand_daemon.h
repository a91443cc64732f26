#pragma once

// Integration-test plumbing: a temp root with short paths, a real `stagehand` daemon on a unix
// socket in it, and a cleanup that leaves no mount, loop device or session process behind even
// when a test fails.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "base/status.h"
#include "proto/csi.grpc.pb.h"

namespace stagehand::testbed {

// True when integration tests may run: root and SH_INTEGRATION=1.
bool IntegrationEnabled();

class StagehandDaemon {
 public:
  // `root` is a short temp dir; state, runtime dir and socket live in it.
  explicit StagehandDaemon(std::string root, std::vector<std::string> extra_flags = {});
  StagehandDaemon(const StagehandDaemon&) = delete;
  StagehandDaemon& operator=(const StagehandDaemon&) = delete;
  ~StagehandDaemon();

  // Starts the daemon and waits until its CSI socket accepts connections.
  absl::Status Start();
  // SIGKILL, as in a crash.
  void Kill();

  // The flags of the next Start() beyond the standard ones.
  void set_extra_flags(std::vector<std::string> flags) { extra_flags_ = std::move(flags); }

  // SIGTERM and wait; returns the exit code.
  int Stop();

  // Runs the binary with `flags` (without the standard ones) and returns its exit code.
  pid_t pid() const { return pid_; }

  std::string endpoint() const { return "unix://" + socket_; }

  std::string socket_path() const { return socket_; }

  std::string state_dir() const { return root_ + "/state"; }

  std::string runtime_dir() const { return root_ + "/run"; }

  csi::v1::Node::Stub& node() { return *node_; }

  csi::v1::Identity::Stub& identity() { return *identity_; }

 private:
  std::string root_;
  std::string socket_;
  std::vector<std::string> extra_flags_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<csi::v1::Node::Stub> node_;
  std::unique_ptr<csi::v1::Identity::Stub> identity_;
};

// Creates a short temp dir ("/tmp/shXXXXXX").
std::string MakeTempRoot();

// Removes everything stagehand may have left under `root`: mounts (deepest first), loop devices
// backed by files under it, session processes named by status files under it. Then the dir.
void ForceCleanup(const std::string& root);

// What is left under `root`, one line per leftover; empty when clean.
std::vector<std::string> Leftovers(const std::string& root);

// Session processes of the binary under test that are still running, anywhere (not their
// keepers).
std::vector<int> RunningSessionProcesses();

// Session keepers (`... __session --keeper`) of the binary under test still running, anywhere.
std::vector<int> RunningSessionKeepers();

// Writes `content` to `path` and fsyncs it; false on any error (a fault under test may make it
// fail, so it does not fail the test by itself).
bool WriteDurably(const std::string& path, const std::string& content);

// Writes `text` to a kernel control file (cgroup, sysfs, fusectl) in one write: no temp file and
// rename, which such files do not take.
bool WriteControl(const std::string& path, const std::string& text);

// Aborts the FUSE connection mounted at `mountpoint` (what `echo 1 > .../abort` does) through
// fusectl at /sys/fs/fuse/connections, mounted there for the moment when the host has not.
absl::Status AbortFuseConnection(const std::string& mountpoint);

// The live session processes of the agent whose root is `root` (from <root>/run/sessions/*/status).
std::vector<int> SessionPidsUnder(const std::string& root);

// The loop devices whose backing files lie under `root`: (device, backing file).
std::vector<std::pair<std::string, std::string>> LoopsUnder(const std::string& root);

// Their live keepers (detached sessions), from the same status files.
std::vector<int> KeeperPidsUnder(const std::string& root);

// Kills (SIGKILL) every session process of the binary under test and, first, their keepers, so
// that no successor takes over: a dead data path. The sessions are stopped (SIGSTOP) before
// their keepers die, or they would start keepers that adopt them. Returns once all are gone.
void KillSessionsForGood();

// Writes 4096 bytes of `fill` at `offset` of the block device `device` with O_DIRECT. Returns 0,
// or the errno of what failed.
int WriteBlockDirect(const std::string& device, off_t offset, char fill);

// Creates a sparse file of `bytes`.
absl::Status MakeSparseFile(const std::string& path, uint64_t bytes);

// The path of the stagehand binary under test.
std::string StagehandBinary();

// A deadline-bounded client context.
std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 60);

}  // namespace stagehand::testbed
