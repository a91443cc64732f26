#include "base/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/unique_fd.h"
#include "tests/testing/temp_dir.h"

namespace stagehand {
namespace {

using ::testing::HasSubstr;

UniqueFd BoundSocket(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(bind(fd.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

TEST(CheckListeningTest, OkWhenSomethingListens) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/s.sock";
  UniqueFd fd = BoundSocket(path);
  ASSERT_EQ(listen(fd.Get(), 1), 0);

  EXPECT_TRUE(CheckListening(path).ok());
}

TEST(CheckListeningTest, AStaleSocketFileIsUnavailable) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/s.sock";
  BoundSocket(path);  // Closed again: the file stays, nobody listens.

  const absl::Status s = CheckListening(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("Connection refused"));
}

TEST(CheckListeningTest, AMissingFileIsUnavailable) {
  testing::TempDir dir;
  EXPECT_EQ(CheckListening(dir.path() + "/none.sock").code(), absl::StatusCode::kUnavailable);
}

TEST(CheckListeningTest, APathTooLongForSockaddrIsInvalid) {
  EXPECT_EQ(CheckListening("/" + std::string(200, 'a')).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagehand
