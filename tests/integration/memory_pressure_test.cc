// The session process is in the writeback path of its own loop device. Under memory pressure a
// process that needs memory may have to wait for dirty pages to be written back; if the session
// itself waits like that, nothing moves again. Here a memory hog and a buffered writer share a
// small memory cgroup, and their write must finish: with the session in a limited cgroup of its
// own (as deployed), and, where the session can be marked an I/O flusher, in the writers' cgroup
// itself (the worst case: whatever it allocates is reclaimed from the writer's dirty pages).
// Whatever happens, the test unsticks the volume (aborting its FUSE connection) before it ends,
// so a failure never leaves a hung machine behind.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/ascii.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/spawn.h"
#include "proto/state.pb.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

constexpr char kMemoryCgroups[] = "/sys/fs/cgroup/memory";
constexpr char kFuseControl[] = "/sys/fs/fuse/connections";

// A memory cgroup (v1) of `limit` bytes; its processes go back to the root one and it is removed
// when destroyed.
class MemoryCgroup {
 public:
  MemoryCgroup(const std::string& name, uint64_t limit)
      : dir_(std::string(kMemoryCgroups) + "/" + name) {
    ok_ = mkdir(dir_.c_str(), 0755) == 0 &&
          testbed::WriteControl(dir_ + "/memory.limit_in_bytes", std::to_string(limit));
  }

  ~MemoryCgroup() {
    auto procs = ReadFileToString(dir_ + "/cgroup.procs");
    for (absl::string_view p : absl::StrSplit(procs.value_or(""), '\n', absl::SkipEmpty())) {
      testbed::WriteControl(std::string(kMemoryCgroups) + "/cgroup.procs", std::string(p));
    }
    rmdir(dir_.c_str());
  }

  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  bool ok() const { return ok_; }

  // How many times a charge hit the limit (and had to reclaim first).
  uint64_t LimitHits() const {
    uint64_t n = 0;
    return absl::SimpleAtoi(
               absl::StripAsciiWhitespace(ReadFileToString(dir_ + "/memory.failcnt").value_or("")),
               &n)
               ? n
               : 0;
  }

  bool Add(int pid) const {
    return testbed::WriteControl(dir_ + "/cgroup.procs", std::to_string(pid));
  }

  // `argv` started inside the cgroup (through sh, which moves itself in, then execs).
  std::vector<std::string> Inside(const std::string& command) const {
    return {"/bin/sh", "-c", absl::StrCat("echo $$ > ", dir_, "/cgroup.procs && exec ", command)};
  }

 private:
  std::string dir_;
  bool ok_ = false;
};

// Waits up to `timeout` for child `pid` to exit (without reaping it). True if it did.
bool WaitForExit(pid_t pid, std::chrono::milliseconds timeout) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    return false;
  }
  pollfd p{pidfd, POLLIN, 0};
  int n = 0;
  do {
    n = poll(&p, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  close(pidfd);
  return n > 0;
}

// The FUSE connection number of the mount at `mountpoint` (its device minor), from
// /proc/self/mountinfo: stat() on a hung FUSE mount could hang too.
std::string FuseConnectionOf(const std::string& mountpoint) {
  for (absl::string_view line :
       absl::StrSplit(ReadFileToString("/proc/self/mountinfo").value_or(""), '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && fields[4] == mountpoint) {
      std::vector<absl::string_view> device = absl::StrSplit(fields[2], ':');
      return device.size() == 2 ? std::string(device[1]) : "";
    }
  }
  return "";
}

class MemoryPressureTest : public NodeIntegrationTest {
 protected:
  // Aborts the FUSE connection under `mountpoint` (its I/O fails from then on): the way out of
  // a hang, so that nothing stays stuck when the test fails.
  static void AbortFuse(const std::string& mountpoint) {
    if (access((std::string(kFuseControl) + "/abort").c_str(), F_OK) != 0) {
      mount("fusectl", kFuseControl, "fusectl", 0, nullptr);
    }
    const std::string connection = FuseConnectionOf(mountpoint);
    if (!connection.empty()) {
      testbed::WriteControl(absl::StrCat(kFuseControl, "/", connection, "/abort"), "1");
    }
  }

  // Stages and publishes a volume, then writes 384 MiB (buffered, then fsync) into it from a
  // memory cgroup of 192 MiB in which a hog keeps 120 MiB of anonymous memory busy (no swap:
  // the writer's dirty pages must be written back, through the session, to make room). The
  // session process goes into `session_cgroup`, or into the writer's own when that is null.
  void WriteUnderPressure(const MemoryCgroup* session_cgroup) {
    AddLun(512ull << 20);
    const std::string target = root_ + "/pod";
    ASSERT_TRUE(Stage(StageRequest("vol-mem")).ok());
    ASSERT_TRUE(Publish(PublishRequest("vol-mem", target)).ok());
    const std::string session_dir = SessionDir();
    const auto now = SessionNow();
    ASSERT_TRUE(now.has_value());
    const state::v1::SessionStatus& status = *now;
    EXPECT_TRUE(status.memory_locked()) << "the session locks its memory";

    MemoryCgroup writers("stagehand-writers-" + std::to_string(getpid()), 192ull << 20);
    ASSERT_TRUE(writers.ok());
    ASSERT_TRUE((session_cgroup != nullptr ? session_cgroup : &writers)->Add(status.pid()));
    // The hog says "ready" once all its pages are touched; it goes on touching them.
    const auto hog_command = writers.Inside(
        "python3 -c 'import sys\na = bytearray(120 << 20)\na[::4096] = bytes(len(a[::4096]))\n"
        "print(\"ready\", flush=True)\nwhile True:\n  a[::4096] = bytes(len(a[::4096]))'");
    std::vector<char*> hog_argv = SpawnArgv(hog_command);
    int ready[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, ready[1], STDOUT_FILENO);
    pid_t hog = 0;
    const int spawned = posix_spawn(&hog, hog_argv[0], &actions, nullptr, hog_argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(ready[1]);
    ASSERT_EQ(spawned, 0);
    absl::Cleanup unstick = [&] {
      kill(hog, SIGKILL);
      waitpid(hog, nullptr, 0);
      AbortFuse(session_dir + "/mnt");  // Only if still needed: after a pass, unstaged already.
    };
    // Up to the newline: the pipe may deliver "ready" and "\n" in two reads.
    std::string word;
    char c = 0;
    while (word.size() < 8 && read(ready[0], &c, 1) == 1 && c != '\n') {
      word += c;
    }
    close(ready[0]);
    ASSERT_EQ(word, "ready") << "the memory hog did not start";

    const auto dd_command =
        writers.Inside("dd if=/dev/zero of=" + target + "/big bs=1M count=384 conv=fsync");
    std::vector<char*> dd_argv = SpawnArgv(dd_command);
    pid_t dd = 0;
    ASSERT_EQ(posix_spawn(&dd, dd_argv[0], nullptr, nullptr, dd_argv.data(), environ), 0);
    // A hang, not a slow run: after 4 minutes the volume is aborted (dd then fails and exits).
    const bool finished = WaitForExit(dd, std::chrono::minutes(4));
    if (!finished) {
      AbortFuse(session_dir + "/mnt");
    }
    int dd_status = 0;
    waitpid(dd, &dd_status, 0);

    ASSERT_TRUE(finished) << "the write hung under memory pressure";
    EXPECT_TRUE(WIFEXITED(dd_status) && WEXITSTATUS(dd_status) == 0) << dd_status;
    EXPECT_GT(writers.LimitHits(), 0u) << "the writers never reached their memory limit";
    kill(hog, SIGKILL);
    waitpid(hog, nullptr, 0);
    EXPECT_TRUE(Unpublish("vol-mem", target).ok());
    EXPECT_TRUE(Unstage("vol-mem", Staging("vol-mem")).ok());
  }
};

bool HaveMemoryCgroups() {
  return access(kMemoryCgroups, W_OK) == 0;
}

// As deployed: the session runs in a cgroup of its own (its systemd unit, or the node plugin's
// pod), here with a limit as a DaemonSet would set one; the writers are somewhere else.
TEST_F(MemoryPressureTest, BufferedWritesFromAMemoryStarvedCgroupFinish) {
  if (!HaveMemoryCgroups()) {
    GTEST_SKIP() << "no cgroup v1 memory controller at " << kMemoryCgroups;
  }
  MemoryCgroup session_cgroup("stagehand-session-" + std::to_string(getpid()), 96ull << 20);
  ASSERT_TRUE(session_cgroup.ok());
  WriteUnderPressure(&session_cgroup);
}

// The worst case: the session is charged to the very cgroup whose dirty pages it must write
// back. The v1 memory controller makes a task that reclaims there wait for writeback to end;
// only PR_SET_IO_FLUSHER (CAP_SYS_RESOURCE) keeps the session out of that wait.
TEST_F(MemoryPressureTest, BufferedWritesFinishWithTheSessionInTheWritersCgroup) {
  if (!HaveMemoryCgroups()) {
    GTEST_SKIP() << "no cgroup v1 memory controller at " << kMemoryCgroups;
  }
  if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) != 0) {
    GTEST_SKIP() << "PR_SET_IO_FLUSHER needs CAP_SYS_RESOURCE, which this machine does not give "
                    "root; without it a session in its writers' memory cgroup can hang";
  }
  prctl(PR_SET_IO_FLUSHER, 0, 0, 0, 0);
  WriteUnderPressure(nullptr);
}

}  // namespace
}  // namespace stagehand::testing
