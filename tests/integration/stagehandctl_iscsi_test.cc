// stagehandctl's iscsi commands against the suite's tgtd: SendTargets discovery
// (iscsi/discovery.h) and a probe of one LUN (iscsi::Connection), as a person debugging a
// target runs them.

#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "tests/integration/node_test_base.h"

#ifndef STAGEHANDCTL_BINARY
#error "STAGEHANDCTL_BINARY must be defined (the stagehandctl binary under test)"
#endif

namespace stagehand::testing {
namespace {

class StagehandctlIscsiTest : public NodeIntegrationTest {
 protected:
  ProcessResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), STAGEHANDCTL_BINARY);
    auto r = RunProcess(args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ProcessResult{};
  }
};

TEST_F(StagehandctlIscsiTest, DiscoverListsTheTargetWithItsPortal) {
  AddLun();
  const ProcessResult r = Ctl({"-o", "json", "iscsi", "discover", "--portal", tgtd_->portal()});

  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, Iqn())) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, tgtd_->portal())) << r.output;
}

TEST_F(StagehandctlIscsiTest, ProbeReadsTheLunsCapacity) {
  AddLun(64ull << 20);
  const ProcessResult r = Ctl(
      {"-o", "json", "iscsi", "probe", "--portal", tgtd_->portal(), "--iqn", Iqn(), "--lun", "1"});

  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, std::to_string(64ull << 20))) << r.output;
}

TEST_F(StagehandctlIscsiTest, NothingListeningFailsWithTheReason) {
  // Port 1 on loopback: nothing listens there, so the connect is refused at once.
  const ProcessResult discover = Ctl({"iscsi", "discover", "--portal", "127.0.0.1:1"});
  EXPECT_NE(discover.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(discover.output, "127.0.0.1:1")) << discover.output;

  const ProcessResult probe =
      Ctl({"iscsi", "probe", "--portal", "127.0.0.1:1", "--iqn", Iqn(), "--lun", "1"});
  EXPECT_NE(probe.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(probe.output, "127.0.0.1:1")) << probe.output;
}

}  // namespace
}  // namespace stagehand::testing
