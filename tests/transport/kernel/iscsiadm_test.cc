#include "transport/kernel/iscsiadm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::transport::kernel {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

absl::Status Exit(int code, std::string output = "") {
  return IscsiadmStatus(ProcessResult{code, std::move(output)}, "log in to iqn.x at 1.2.3.4:3260");
}

TEST(IscsiadmStatusTest, MapsExitCodesToCsiCodes) {
  EXPECT_THAT(Exit(0), IsOk());
  EXPECT_THAT(Exit(24,
                   "iscsiadm: Could not login to [...].\niscsiadm: initiator reported error "
                   "(24 - iSCSI login failed due to authorization failure)\n"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("authorization failure")));
  EXPECT_THAT(Exit(8), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Exit(4), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Exit(20), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("iscsid")));
  EXPECT_THAT(Exit(19), StatusIs(absl::StatusCode::kNotFound, HasSubstr("iqn")));
  EXPECT_THAT(Exit(7), StatusIs(absl::StatusCode::kInternal, HasSubstr("exit status 7")));
  // The error line wins over stdout, which iscsiadm flushes last.
  EXPECT_THAT(Exit(19,
                   "iscsiadm: initiator reported error (19 - encountered non-retryable iSCSI "
                   "login failure)\nLogging in to [iface: default, ...]\n"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("non-retryable")));
}

TEST(RewriteNodeRecordTest, SetsOurSettingsAndKeepsTheRest) {
  const std::string old =
      "# BEGIN RECORD 2.1.8\n"
      "node.name = iqn.2024-01.dev.stagehand:t\n"
      "node.startup = automatic\n"
      "node.session.scan = auto\n"
      "node.session.auth.authmethod = None\n"
      "node.session.auth.username_in = stale\n"
      "node.conn[0].address = 10.0.2.2\n"
      "# END RECORD\n";
  NodeRecordSettings s;
  s.chap = iscsi::ChapCredentials{"user", "s3cret", "", ""};
  s.initiator_name = "iqn.2024-01.dev.stagehand:node";
  s.replacement_timeout_seconds = 5;

  const std::string out = RewriteNodeRecord(old, s);

  EXPECT_THAT(out, HasSubstr("node.name = iqn.2024-01.dev.stagehand:t\n"));
  EXPECT_THAT(out, HasSubstr("node.conn[0].address = 10.0.2.2\n"));
  EXPECT_THAT(out, HasSubstr("node.startup = manual\n"));
  EXPECT_THAT(out, HasSubstr("node.conn[0].startup = manual\n"));
  EXPECT_THAT(out, HasSubstr("node.session.scan = manual\n"));
  EXPECT_THAT(out, HasSubstr("node.session.auth.authmethod = CHAP\n"));
  EXPECT_THAT(out, HasSubstr("node.session.auth.password = s3cret\n"));
  EXPECT_THAT(out, HasSubstr("iface.initiatorname = iqn.2024-01.dev.stagehand:node\n"));
  EXPECT_THAT(out, HasSubstr("node.session.timeo.replacement_timeout = 5\n"));
  EXPECT_THAT(out, Not(HasSubstr("automatic")));
  EXPECT_THAT(out, Not(HasSubstr("stale")));  // No mutual CHAP left over from before.
  EXPECT_THAT(out, Not(HasSubstr("= None")));
}

TEST(RewriteNodeRecordTest, WithoutChapTheMethodIsNone) {
  const std::string out = RewriteNodeRecord(
      "node.session.auth.authmethod = CHAP\nnode.session.auth.password = old\n", {});

  EXPECT_THAT(out, HasSubstr("node.session.auth.authmethod = None\n"));
  EXPECT_THAT(out, Not(HasSubstr("old")));
}

TEST(NodeRecordChapTest, ReadsBackWhatRewriteWrote) {
  NodeRecordSettings mutual;
  mutual.chap = iscsi::ChapCredentials{"user", "s3cret", "target", "t-s3cret"};
  auto chap = NodeRecordChap(RewriteNodeRecord("node.name = iqn.x\n", mutual));
  ASSERT_TRUE(chap.has_value());
  EXPECT_EQ(chap->user, "user");
  EXPECT_EQ(chap->secret, "s3cret");
  EXPECT_EQ(chap->user_in, "target");
  EXPECT_EQ(chap->secret_in, "t-s3cret");

  NodeRecordSettings one_way;
  one_way.chap = iscsi::ChapCredentials{"user", "pw = with spaces", "", ""};
  chap = NodeRecordChap(RewriteNodeRecord("", one_way));
  ASSERT_TRUE(chap.has_value());
  EXPECT_EQ(chap->secret, "pw = with spaces");
  EXPECT_EQ(chap->user_in, "");

  EXPECT_FALSE(NodeRecordChap(RewriteNodeRecord("", {})).has_value());
  EXPECT_FALSE(NodeRecordChap("# node.session.auth.authmethod = CHAP\n").has_value());
  EXPECT_FALSE(NodeRecordChap("").has_value());
}

}  // namespace
}  // namespace stagehand::transport::kernel
