#include "base/build_id.h"

#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/temp_dir.h"

namespace stagehand {
namespace {

TEST(BuildIdTest, TheRunningProgramAndItsFileAgree) {
  const std::string own = OwnBuildId();
  auto file = FileBuildId("/proc/self/exe");

  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(own.empty());
  EXPECT_EQ(*file, own);
  EXPECT_EQ(own.size(), 40u) << "a SHA-1 in hex, as GNU ld writes it";
}

TEST(BuildIdTest, AFileThatIsNotElfIsRefused) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/x", "#!/bin/sh\n", 0755).ok());

  EXPECT_EQ(FileBuildId(dir.path() + "/x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FileBuildId(dir.path() + "/none").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace stagehand
