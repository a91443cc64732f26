// After the whole suite: no session process (or keeper) of the binary under test may still run, and
// no tgtd started by the tests (each Tgtd is killed by its owner; this catches leaks across
// suites).

#include <gtest/gtest.h>

#include "testbed/stagehand_daemon.h"

namespace stagehand::testing {
namespace {

class LeftoversEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!testbed::IntegrationEnabled()) {
      return;
    }
    EXPECT_TRUE(testbed::RunningSessionProcesses().empty())
        << "session processes left running: "
        << ::testing::PrintToString(testbed::RunningSessionProcesses());
    EXPECT_TRUE(testbed::RunningSessionKeepers().empty())
        << "session keepers left running: "
        << ::testing::PrintToString(testbed::RunningSessionKeepers());
  }
};

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new LeftoversEnvironment);

}  // namespace
}  // namespace stagehand::testing
