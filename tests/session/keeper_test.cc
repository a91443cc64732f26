// The keeper against small shell programs: what it restarts, what it does not, when it gives up.

#include "session/keeper.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace stagehand::session
