#include "base/paths.h"

#include <gtest/gtest.h>

namespace stagehand {
namespace {

TEST(PathsTest, AcceptsCleanAbsolutePaths) {
  EXPECT_TRUE(IsCleanAbsolutePath("/"));
  EXPECT_TRUE(IsCleanAbsolutePath("/var/lib/x"));
  EXPECT_TRUE(IsCleanAbsolutePath("/a/.b/c..d"));
}

TEST(PathsTest, RejectsRelativeTraversingAndUnnormalisedPaths) {
  EXPECT_FALSE(IsCleanAbsolutePath(""));
  EXPECT_FALSE(IsCleanAbsolutePath("a/b"));
  EXPECT_FALSE(IsCleanAbsolutePath("/a/../b"));
  EXPECT_FALSE(IsCleanAbsolutePath("/a/./b"));
  EXPECT_FALSE(IsCleanAbsolutePath("/a//b"));
  EXPECT_FALSE(IsCleanAbsolutePath("/a/b/"));
  EXPECT_FALSE(IsCleanAbsolutePath(std::string_view("/a\0b", 4)));
}

TEST(PathsTest, WithinIsComponentWise) {
  EXPECT_TRUE(IsPathWithin("/var/lib/sh/x", "/var/lib/sh"));
  EXPECT_TRUE(IsPathWithin("/var/lib/sh", "/var/lib/sh"));
  EXPECT_FALSE(IsPathWithin("/var/lib/shx", "/var/lib/sh"));
  EXPECT_TRUE(IsPathWithin("/x", "/"));
}

TEST(PathsTest, ParentAndJoin) {
  EXPECT_EQ(ParentDir("/a/b"), "/a");
  EXPECT_EQ(ParentDir("/a"), "/");
  EXPECT_EQ(JoinPath("/a/", "/b"), "/a/b");
}

}  // namespace
}  // namespace stagehand
