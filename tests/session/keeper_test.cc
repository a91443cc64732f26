// The keeper against small shell programs: what it restarts, what it does not, when it gives up.

#include "session/keeper.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <future>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/service_notify.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::session {
namespace {

KeeperOptions Sh(const std::string& script) {
  KeeperOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.restart_delay = std::chrono::milliseconds(1);
  return options;
}

TEST(ServiceKeeperTest, AnExitStatusIsTheProgramsOwnDecision) {
  EXPECT_EQ(RunKeeper(Sh("exit 3")), 3);
  EXPECT_EQ(RunKeeper(Sh("exit 0")), 0);
}

TEST(ServiceKeeperTest, AProgramKilledByASignalIsStartedAgain) {
  testing::TempDir dir;
  const std::string once = dir.path() + "/started";

  // The first run dies of SIGKILL; the second finds the mark and exits 0.
  const int status =
      RunKeeper(Sh("if [ -e " + once + " ]; then exit 0; fi; touch " + once + "; kill -9 $$"));

  EXPECT_EQ(status, 0);
}

// Its stderr a pipe whose reader is gone (`agent 2>&1 | cat`, the cat killed): the keeper logs
// the death into it and still starts the program again (it died of SIGPIPE).
TEST(ServiceKeeperTest, ALogPipeWithoutAReaderNeverEndsTheKeeper) {
  testing::TempDir dir;
  const std::string once = dir.path() + "/started";
  std::array<int, 2> pipe_fds{};
  ASSERT_EQ(pipe(pipe_fds.data()), 0);
  close(pipe_fds[0]);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    _exit(RunKeeper(Sh("if [ -e " + once + " ]; then exit 0; fi; touch " + once + "; kill -9 $$")));
  }
  close(pipe_fds[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The program's file replaced on disk by a broken one (a script exiting 7) before it dies: the
// keeper restarts the file it started, not what is at the path now.
TEST(ServiceKeeperTest, ARestartRunsTheFileStartedFirstNotWhatReplacedIt) {
  testing::TempDir dir;
  const std::string program = dir.path() + "/prog";
  const std::string once = dir.path() + "/started";
  ASSERT_TRUE(std::filesystem::copy_file("/bin/sh", program));
  KeeperOptions options = Sh("if [ -e " + once + " ]; then exit 0; fi; touch " + once +
                             "; printf '#!/bin/sh\\nexit 7\\n' > " + program + ".new; chmod +x " +
                             program + ".new; mv " + program + ".new " + program + "; kill -9 $$");
  options.argv[0] = program;

  EXPECT_EQ(RunKeeper(options), 0) << "7: the replacement ran";
}

TEST(ServiceKeeperTest, AProgramThatKeepsDyingIsGivenUpOn) {
  KeeperOptions options = Sh("kill -9 $$");
  options.start_limit_burst = 3;

  EXPECT_EQ(RunKeeper(options), 1);
}

TEST(ServiceKeeperTest, AProgramThatMissesItsWatchdogIsKilledAndStartedAgain) {
  testing::TempDir dir;
  const std::string once = dir.path() + "/started";
  KeeperOptions options = Sh("if [ -e " + once + " ]; then exit 0; fi; touch " + once +
                             "; test -n \"$WATCHDOG_USEC\" && exec sleep 600");
  options.watchdog = std::chrono::milliseconds(100);

  EXPECT_EQ(RunKeeper(options), 0) << "the silent first run was replaced";
}

TEST(ServiceKeeperTest, TheProgramGetsTheProtocolAndTheKeepersVariables) {
  KeeperOptions options = Sh(R"(test -n "$NOTIFY_SOCKET" && test "$KEPT_BY" = test)");
  options.env["KEPT_BY"] = "test";

  EXPECT_EQ(RunKeeper(options), 0);
}

// A process of the test to be adopted: it waits for the keeper's address on a pipe, then, when
// `stopping` >= 0, says STOPPING=1 with that exit status and exits; otherwise it waits to be
// killed.
struct Adoptee {
  explicit Adoptee(int stopping) {
    std::array<int, 2> p{};
    if (pipe(p.data()) != 0) {
      return;
    }
    pid = fork();
    if (pid == 0) {
      close(p[1]);
      std::string address;
      char c = 0;
      while (read(p[0], &c, 1) == 1 && c != '\n') {
        address.push_back(c);
      }
      if (stopping < 0) {
        pause();
        _exit(0);
      }
      SetNotifySocket(address);
      (void)NotifyServiceManager("STOPPING=1\nEXIT_STATUS=" + std::to_string(stopping));
      _exit(0);
    }
    close(p[0]);
    tell.Reset(p[1]);
  }

  ~Adoptee() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      (void)waitpid(pid, nullptr, 0);
    }
  }

  Adoptee(const Adoptee&) = delete;
  Adoptee& operator=(const Adoptee&) = delete;

  pid_t pid = -1;
  UniqueFd tell;  // Write end: the keeper's address goes there.
};

// Runs a keeper that adopts `adoptee` with one stored descriptor, passes the address it says
// to the adoptee, and returns the keeper's exit status.
std::future<int> Adopt(const KeeperOptions& options, Adoptee& adoptee) {
  KeeperAdoption adoption;
  adoption.pid = adoptee.pid;
  adoption.pidfd.Reset(static_cast<int>(syscall(SYS_pidfd_open, adoptee.pid, 0)));
  std::array<int, 2> ready{};
  EXPECT_EQ(pipe2(ready.data(), O_CLOEXEC), 0);
  adoption.ready.Reset(ready[1]);
  adoption.store["fuse"].emplace_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
  auto status = std::async(std::launch::async, [&options, a = std::move(adoption)]() mutable {
    return RunKeeper(options, std::move(a));
  });
  UniqueFd hello_fd(ready[0]);
  const std::string hello = ReadToEnd(hello_fd.Get()).value_or("");
  const std::string address = hello.substr(hello.find(' ') + 1);
  EXPECT_FALSE(address.empty()) << hello;
  (void)WriteFully(adoptee.tell.Get(), address);
  return status;
}

// A process whose keeper died, adopted by a new keeper: killed, it is started again with what
// was stored, as a child of the keeper would be.
TEST(ServiceKeeperTest, AnAdoptedProcessThatDiesIsStartedAgainWithTheStore) {
  const KeeperOptions options = Sh(R"(test "$LISTEN_FDS" = 1 && test "$LISTEN_FDNAMES" = fuse)");
  Adoptee adoptee(/*stopping=*/-1);
  ASSERT_GT(adoptee.pid, 0);
  auto status = Adopt(options, adoptee);
  kill(adoptee.pid, SIGKILL);

  EXPECT_EQ(status.get(), 0) << "the restart got the stored descriptor";
}

// An adopted process cannot be waited for: what it said before it exited decides.
TEST(ServiceKeeperTest, AnAdoptedProcessThatSaidItStopsIsNotStartedAgain) {
  const KeeperOptions options = Sh("exit 9");
  Adoptee adoptee(/*stopping=*/4);
  ASSERT_GT(adoptee.pid, 0);

  EXPECT_EQ(Adopt(options, adoptee).get(), 4) << "9: it was started again";
}

}  // namespace
}  // namespace stagehand::session
