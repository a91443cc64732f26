#include "iscsi/initiator_name.h"

#include <stdlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "iscsi/target_spec.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::iscsi {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

class InitiatorNameTest : public ::testing::Test {
 protected:
  stagehand::testing::TempDir temp_;
  const std::string dir_ = temp_.path();
};

TEST_F(InitiatorNameTest, FlagWinsAndIsValidated) {
  auto name = ResolveInitiatorName("iqn.2026-11.com.example:n1", "", dir_);
  ASSERT_THAT(name, IsOk());
  EXPECT_EQ(*name, "iqn.2026-11.com.example:n1");
  EXPECT_THAT(ResolveInitiatorName("not-an-iqn", "", dir_),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(InitiatorNameTest, ReadsOpenIscsiConfig) {
  const std::string conf = dir_ + "/initiatorname.iscsi";
  ASSERT_THAT(
      WriteFileAtomically(conf, "## comment\nInitiatorName=iqn.1993-08.org.debian:01:abc\n", 0644),
      IsOk());

  auto name = ResolveInitiatorName("", conf, dir_ + "/state");

  ASSERT_THAT(name, IsOk());
  EXPECT_EQ(*name, "iqn.1993-08.org.debian:01:abc");
}

TEST_F(InitiatorNameTest, GeneratedNameIsStableAndValid) {
  auto first = ResolveInitiatorName("", dir_ + "/missing", dir_ + "/state");
  auto second = ResolveInitiatorName("", dir_ + "/missing", dir_ + "/state");

  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(*first, *second);
  EXPECT_TRUE(iscsi::IsValidTargetName(*first)) << *first;
}

TEST(InitiatorNameFromConfTest, ReadsOpenIscsiFile) {
  EXPECT_EQ(InitiatorNameFromConf("## comment\nInitiatorName=iqn.1993-08.org.debian:01:ab \n"),
            "iqn.1993-08.org.debian:01:ab");
  EXPECT_EQ(InitiatorNameFromConf("# nothing\n"), "");
}

}  // namespace
}  // namespace stagehand::iscsi
