#include "base/file_io.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;

class FileIoTest : public ::testing::Test {
 protected:
  stagehand::testing::TempDir temp_;
  const std::string dir_ = temp_.path();
};

TEST_F(FileIoTest, WritesAndReplacesAtomically) {
  const std::string path = dir_ + "/r.json";

  ASSERT_THAT(WriteFileAtomically(path, "one", 0600), IsOk());
  ASSERT_THAT(WriteFileAtomically(path, "two", 0600), IsOk());

  EXPECT_EQ(ReadFileToString(path).value_or(""), "two");
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
}

// A full disk, played by a file size limit: the write fails, the old content stays, and no
// temp file is left behind.
TEST_F(FileIoTest, AFailedWriteLeavesTheOldFileAndNoTempFile) {
  const std::string path = dir_ + "/r.json";
  ASSERT_THAT(WriteFileAtomically(path, "old", 0600), IsOk());
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  sighandler_t saved_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);

  const absl::Status s = WriteFileAtomically(path, std::string(8192, 'x'), 0600);
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, saved_handler);

  EXPECT_FALSE(s.ok());
  EXPECT_EQ(ReadFileToString(path).value_or(""), "old");
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "temp file left behind";
}

}  // namespace
}  // namespace stagehand
