#include "base/service_notify.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"

namespace stagehand {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(ParseNotifyStateTest, KeyValueLinesBecomeAMap) {
  EXPECT_THAT(ParseNotifyState("FDSTORE=1\nFDNAME=fuse\nnot a pair\n=x\nA=b=c"),
              ElementsAre(Pair("A", "b=c"), Pair("FDNAME", "fuse"), Pair("FDSTORE", "1")));
}

TEST(NotifyServiceManagerTest, WithoutAManagerNothingIsSent) {
  unsetenv("NOTIFY_SOCKET");  // NOLINT(concurrency-mt-unsafe): single-threaded test.

  EXPECT_TRUE(NotifyServiceManager("READY=1").ok());
}

TEST(NotifyServiceManagerTest, StateAndDescriptorsReachTheManagerWithTheSendersPid) {
  const std::string address = "@stagehand-notify-test/" + std::to_string(getpid());
  auto socket = NotifySocket::Bind(address);
  ASSERT_TRUE(socket.ok()) << socket.status();
  setenv("NOTIFY_SOCKET", address.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): test.
  auto memory = SealedMemoryFile("test", "kept across a restart");
  ASSERT_TRUE(memory.ok()) << memory.status();
  const std::array<int, 1> fds{memory->Get()};

  ASSERT_TRUE(NotifyServiceManager("FDSTORE=1\nFDNAME=handover", fds).ok());
  auto message = socket->Receive();
  unsetenv("NOTIFY_SOCKET");  // NOLINT(concurrency-mt-unsafe): test.

  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->sender_pid, getpid());
  EXPECT_THAT(message->fields, ElementsAre(Pair("FDNAME", "handover"), Pair("FDSTORE", "1")));
  ASSERT_EQ(message->fds.size(), 1u);
  EXPECT_EQ(ReadWholeFd(message->fds[0].Get()).value_or(""), "kept across a restart");
  EXPECT_FALSE(socket->Receive().has_value()) << "one message, once";
}

TEST(TakeListenFdsTest, DescriptorsForAnotherProcessAreNotTaken) {
  // NOLINTBEGIN(concurrency-mt-unsafe): single-threaded test.
  setenv("LISTEN_FDS", "1", 1);
  setenv("LISTEN_PID", std::to_string(getpid() + 1).c_str(), 1);
  setenv("LISTEN_FDNAMES", "fuse", 1);
  // NOLINTEND(concurrency-mt-unsafe)

  EXPECT_TRUE(TakeListenFds().empty());
  EXPECT_EQ(getenv("LISTEN_FDS"), nullptr) << "removed for children";  // NOLINT
}

TEST(TakeListenFdsTest, NamedDescriptorsFromThreeOnAreTaken) {
  // Descriptor 3 as a manager would pass it: a copy of a memory file.
  auto memory = SealedMemoryFile("test", "three");
  ASSERT_TRUE(memory.ok());
  UniqueFd saved(fcntl(3, F_DUPFD_CLOEXEC, 10));  // Whatever the test runner had there.
  ASSERT_EQ(dup2(memory->Get(), 3), 3);
  // NOLINTBEGIN(concurrency-mt-unsafe): single-threaded test.
  setenv("LISTEN_FDS", "1", 1);
  setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
  setenv("LISTEN_FDNAMES", "handover", 1);
  // NOLINTEND(concurrency-mt-unsafe)

  auto taken = TakeListenFds();

  ASSERT_EQ(taken.count("handover"), 1u);
  EXPECT_EQ(taken["handover"].Get(), 3);
  EXPECT_EQ(fcntl(3, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_EQ(ReadWholeFd(3).value_or(""), "three");
  taken.clear();
  if (saved) {
    dup2(saved.Get(), 3);
  }
}

}  // namespace
}  // namespace stagehand
