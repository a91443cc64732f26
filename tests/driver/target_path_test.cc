#include "driver/target_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::driver {
namespace {

using ::testing::HasSubstr;

class TargetPathTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  void Write(const std::string& name, const std::string& content) {
    ASSERT_TRUE(WriteFileAtomically(Path(name), content, 0644).ok());
  }

  testing::TempDir dir_;
};

TEST_F(TargetPathTest, ParentMustBeRealAndThePathNoLink) {
  ASSERT_EQ(mkdir(Path("real").c_str(), 0755), 0);
  ASSERT_EQ(symlink(Path("real").c_str(), Path("link").c_str()), 0);
  EXPECT_TRUE(CheckParentIsReal(Path("real/t"), "target_path").ok());
  EXPECT_THAT(CheckParentIsReal(Path("link/t"), "target_path").message(),
              HasSubstr("goes through a symbolic link"));
  EXPECT_THAT(CheckParentIsReal(Path("missing/t"), "target_path").message(),
              HasSubstr("does not exist; create it first"));
  EXPECT_THAT(CheckParentIsReal(Path("link"), "staging_target_path").message(),
              HasSubstr("staging_target_path '" + Path("link") + "' is a symbolic link"));
  EXPECT_EQ(CheckParentIsReal(Path("link/t"), "target_path").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TargetPathTest, PublishNeverHidesAnything) {
  ASSERT_EQ(mkdir(Path("empty").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(Path("full").c_str(), 0755), 0);
  Write("full/data", "x");
  Write("zero", "");
  Write("file", "data");

  struct Case {
    const char* path;
    bool block;
    bool ok;
  };

  const std::vector<Case> cases = {
      {"absent", false, true}, {"absent", true, true}, {"empty", false, true},
      {"full", false, false},  {"zero", true, true},   {"file", true, false},
      {"empty", true, false},  {"zero", false, false},
  };
  for (const Case& c : cases) {
    const absl::Status s = CheckTargetEmpty(Path(c.path), c.block);
    EXPECT_EQ(s.ok(), c.ok) << c.path << (c.block ? " block: " : " mount: ") << s;
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.path;
    }
  }
}

TEST_F(TargetPathTest, RemovesOnlyWhatAPublishMade) {
  ASSERT_EQ(mkdir(Path("empty").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(Path("full").c_str(), 0755), 0);
  Write("full/data", "x");
  Write("file", "data");
  ASSERT_TRUE(CreateBlockTarget(Path("block")).ok());
  ASSERT_TRUE(CreateBlockTarget(Path("file")).ok()) << "an existing file is kept";
  for (const char* name : {"empty", "full", "file", "block", "absent"}) {
    EXPECT_TRUE(RemoveTarget(Path(name)).ok()) << name;
  }
  EXPECT_FALSE(PathExists(Path("empty")));
  EXPECT_FALSE(PathExists(Path("block")));
  EXPECT_TRUE(PathExists(Path("full/data"))) << "not ours to delete";
  auto kept = ReadFileToString(Path("file"));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "data");
}

TEST(CheckNoOverlapTest, TargetsStayOutOfEveryStagingAndPublish) {
  StagedVolume a;
  a.volume_id = "a";
  a.staging_path = "/s/a";
  a.publications.push_back({.target_path = "/p/a", .readonly = false, .mount_flags = {}});
  const std::vector<StagedVolume> volumes = {a};

  struct Case {
    const char* volume;
    const char* target;
    bool ok;
  };

  const std::vector<Case> cases = {
      {"b", "/p/b", true},    {"b", "/s/a/x", false}, {"b", "/s", false},   {"b", "/p/a", false},
      {"b", "/p/a/x", false}, {"a", "/p/a", true},    {"b", "/s/ab", true},
  };
  for (const Case& c : cases) {
    const absl::Status s = CheckNoOverlap(volumes, c.volume, c.target);
    EXPECT_EQ(s.ok(), c.ok) << c.volume << " at " << c.target << ": " << s;
  }
}

}  // namespace
}  // namespace stagehand::driver
