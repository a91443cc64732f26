// After the whole suite: no session process (or keeper) of the binary under test may still run, and
// no tgtd started by the tests (each Tgtd is killed by its owner; this catches leaks across
// suites).

#include <gtest/gtest.h>

#include "tests/integration/cluster.h"

namespace stagehand::testing {
namespace {

class LeftoversEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!IntegrationEnabled()) {
      return;
    }
    EXPECT_TRUE(RunningSessionProcesses().empty())
        << "session processes left running: "
        << ::testing::PrintToString(RunningSessionProcesses());
    EXPECT_TRUE(RunningSessionKeepers().empty())
        << "session keepers left running: " << ::testing::PrintToString(RunningSessionKeepers());
  }
};

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new LeftoversEnvironment);

}  // namespace
}  // namespace stagehand::testing
