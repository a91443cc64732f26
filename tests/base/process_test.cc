#include "base/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <optional>

#include <gtest/gtest.h>

namespace stagehand {
namespace {

TEST(ProcessTest, StartTimeAndStateOfThisProcess) {
  EXPECT_NE(ProcessStartTime(getpid()), 0U);
  EXPECT_TRUE(IsSameProcessAlive(getpid(), ProcessStartTime(getpid())));
  EXPECT_EQ(ProcessState(getpid()), 'R');
}

TEST(ProcessTest, AStartTimeAsUnixSecondsLiesBetweenTheBootAndNow) {
  const std::optional<double> started = StartTimeAsUnixSeconds(ProcessStartTime(getpid()));
  ASSERT_TRUE(started.has_value());
  EXPECT_LE(*started, static_cast<double>(time(nullptr)) + 1);
  EXPECT_GT(*started, 1.6e9);  // Not ticks since boot: seconds since the epoch.
  EXPECT_FALSE(StartTimeAsUnixSeconds(0).has_value());
}

TEST(ProcessTest, AStoppedChildIsT) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  EXPECT_EQ(ProcessState(child), 'T');
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  EXPECT_EQ(ProcessState(child), '\0');
  EXPECT_FALSE(IsSameProcessAlive(child, 1));
}

}  // namespace
}  // namespace stagehand
