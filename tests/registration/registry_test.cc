#include "registration/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "registration/registry_files.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::registration {
namespace {

using stagehand::testing::IsOk;
using stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

RegisteredPlugin Plugin(const std::string& name, const std::string& socket, bool healthy = true) {
  RegisteredPlugin plugin;
  plugin.set_name(name);
  plugin.set_socket_path(socket);
  plugin.set_endpoint("/csi/" + name + ".sock");
  plugin.set_node_id("node-1");
  plugin.set_healthy(healthy);
  return plugin;
}

TEST(RegistryTest, AddsFindsAndRemovesBySocket) {
  Registry registry;
  int changes = 0;
  registry.SetListener([&changes] { ++changes; });
  std::stop_source source;

  ASSERT_THAT(registry.Add(Plugin("a.dev", "/reg/a-reg.sock"), source.get_token()), IsOk());
  auto found = registry.Find("a.dev");
  auto removed = registry.RemoveBySocket("/reg/a-reg.sock");

  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->endpoint(), "/csi/a.dev.sock");
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->name(), "a.dev");
  EXPECT_FALSE(registry.Find("a.dev").has_value());
  EXPECT_EQ(changes, 2);
}

TEST(RegistryTest, AStoppedHandshakeCannotRegister) {
  Registry registry;
  std::stop_source source;
  source.request_stop();

  EXPECT_THAT(registry.Add(Plugin("a.dev", "/reg/a-reg.sock"), source.get_token()),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_TRUE(registry.List().empty());
}

TEST(RegistryTest, ASecondSocketCannotTakeTheNameOfAHealthyPlugin) {
  Registry registry;
  std::stop_source source;
  ASSERT_THAT(registry.Add(Plugin("a.dev", "/reg/a-reg.sock"), source.get_token()), IsOk());

  EXPECT_THAT(registry.Add(Plugin("a.dev", "/reg/other-reg.sock"), source.get_token()),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("/reg/a-reg.sock")));
  EXPECT_EQ(registry.Find("a.dev")->socket_path(), "/reg/a-reg.sock");
}

TEST(RegistryTest, ASecondSocketReplacesAnUnhealthyHolder) {
  Registry registry;
  std::stop_source source;
  ASSERT_THAT(registry.Add(Plugin("a.dev", "/reg/a-reg.sock"), source.get_token()), IsOk());
  ASSERT_THAT(registry.SetHealth("/reg/a-reg.sock", false, "Probe: deadline exceeded"), IsOk());

  ASSERT_THAT(registry.Add(Plugin("a.dev", "/reg/other-reg.sock"), source.get_token()), IsOk());

  EXPECT_EQ(registry.Find("a.dev")->socket_path(), "/reg/other-reg.sock");
  EXPECT_THAT(registry.SetHealth("/reg/a-reg.sock", true, ""),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(RegistryTest, HealthChangesAreReportedOnce) {
  Registry registry;
  std::stop_source source;
  ASSERT_THAT(registry.Add(Plugin("a.dev", "/reg/a-reg.sock"), source.get_token()), IsOk());

  auto first = registry.SetHealth("/reg/a-reg.sock", false, "down");
  auto second = registry.SetHealth("/reg/a-reg.sock", false, "down");
  auto back = registry.SetHealth("/reg/a-reg.sock", true, "");

  EXPECT_TRUE(*first);
  EXPECT_FALSE(*second);
  EXPECT_TRUE(*back);
  EXPECT_TRUE(registry.Find("a.dev")->healthy());
}

TEST(RegistryTest, FailedAttemptsAreListedUntilTheSocketRegistersOrGoes) {
  Registry registry;
  std::stop_source source;
  RegistrationAttempt attempt;
  attempt.set_socket_path("/reg/a-reg.sock");
  attempt.set_last_error("GetInfo: deadline exceeded");
  attempt.set_failures(1);

  registry.RecordFailure(attempt, source.get_token());
  ASSERT_EQ(registry.Snapshot().pending_size(), 1);
  ASSERT_THAT(registry.Add(Plugin("a.dev", "/reg/a-reg.sock"), source.get_token()), IsOk());
  EXPECT_EQ(registry.Snapshot().pending_size(), 0);

  registry.RecordFailure(attempt, source.get_token());
  (void)registry.RemoveBySocket("/reg/a-reg.sock");
  EXPECT_EQ(registry.Snapshot().pending_size(), 0);
  EXPECT_TRUE(registry.List().empty());
}

TEST(RegistryTest, CsiNodeListsDriversWithNodeIdLimitAndSortedTopologyKeys) {
  state::v1::PluginRegistryStatus status;
  auto plugin = Plugin("a.dev", "/reg/a-reg.sock");
  plugin.set_max_volumes_per_node(16);
  (*plugin.mutable_topology())["zone"] = "z1";
  (*plugin.mutable_topology())["rack"] = "r7";
  *status.add_plugins() = plugin;

  const auto node = ToCsiNode("host-1", status);

  EXPECT_EQ(node.node_name(), "host-1");
  ASSERT_EQ(node.drivers_size(), 1);
  EXPECT_EQ(node.drivers(0).name(), "a.dev");
  EXPECT_EQ(node.drivers(0).node_id(), "node-1");
  EXPECT_EQ(node.drivers(0).allocatable_count(), 16);
  EXPECT_THAT(node.drivers(0).topology_keys(), ElementsAre("rack", "zone"));
}

}  // namespace
}  // namespace stagehand::registration
