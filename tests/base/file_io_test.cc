#include "base/file_io.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
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

// A file rewritten often keeps its previous version beside it and writes over that one: the
// inodes stay the same from the second write on, the content is always complete, shorter content
// leaves no tail of the longer one, and RemoveRewrittenFile takes both.
TEST_F(FileIoTest, ARewriteReusesThePreviousVersionsInode) {
  const std::string path = dir_ + "/r.json";
  const std::string tmp = path + ".tmp";
  auto inode = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
  };
  ASSERT_THAT(WriteFileAtomically(path, "first, long content", 0600, Durability::kAtomicRewrite),
              IsOk());
  EXPECT_NE(access(tmp.c_str(), F_OK), 0) << "the first write has no previous version";
  ASSERT_THAT(WriteFileAtomically(path, "second", 0600, Durability::kAtomicRewrite), IsOk());
  EXPECT_EQ(ReadFileToString(path).value_or(""), "second");
  EXPECT_EQ(ReadFileToString(tmp).value_or(""), "first, long content");
  const std::set<ino_t> inodes = {inode(path), inode(tmp)};

  ASSERT_THAT(WriteFileAtomically(path, "3rd", 0600, Durability::kAtomicRewrite), IsOk());
  ASSERT_THAT(WriteFileAtomically(path, "fourth", 0640, Durability::kAtomicRewrite), IsOk());

  EXPECT_EQ(ReadFileToString(path).value_or(""), "fourth");
  EXPECT_EQ(ReadFileToString(tmp).value_or(""), "3rd");
  EXPECT_EQ((std::set<ino_t>{inode(path), inode(tmp)}), inodes);

  struct stat st {};

  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640U);

  ASSERT_THAT(RemoveRewrittenFile(path), IsOk());
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_NE(access(tmp.c_str(), F_OK), 0);
  EXPECT_THAT(RemoveRewrittenFile(path), IsOk());
}

}  // namespace
}  // namespace stagehand
