#include "status/agent_health.h"

#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::status {
namespace {

using reconciler::VolumePhase;
using reconciler::VolumeStatus;

VolumeStatus Volume(VolumePhase phase, const std::string& condition = "") {
  VolumeStatus v;
  v.phase = phase;
  v.condition = condition;
  return v;
}

TEST(CountVolumesTest, CountsPublishedFailingAndEachPhase) {
  const std::vector<VolumeStatus> volumes = {
      Volume(VolumePhase::kPublished),
      Volume(VolumePhase::kPublished, "I/O errors on the data path"),  // Abnormal: failing.
      Volume(VolumePhase::kError),
      Volume(VolumePhase::kWaiting),
      Volume(VolumePhase::kStaging),
      Volume(VolumePhase::kPending),
  };

  const VolumeCounts counts = CountVolumes(volumes);

  EXPECT_EQ(counts.total, 6);
  EXPECT_EQ(counts.published, 2);
  EXPECT_EQ(counts.failing, 3);
  EXPECT_EQ(counts.by_phase.at(VolumePhase::kPublished), 2);
  EXPECT_EQ(counts.by_phase.at(VolumePhase::kError), 1);
  EXPECT_EQ(counts.by_phase.at(VolumePhase::kWaiting), 1);
  EXPECT_EQ(counts.by_phase.count(VolumePhase::kStaged), 0u);
}

TEST(CountVolumesTest, NoVolumesCountsNothing) {
  const VolumeCounts counts = CountVolumes({});
  EXPECT_EQ(counts.total, 0);
  EXPECT_EQ(counts.published, 0);
  EXPECT_EQ(counts.failing, 0);
  EXPECT_TRUE(counts.by_phase.empty());
}

TEST(VolumePhaseTest, EveryPhaseHasItsOwnName) {
  std::set<std::string> names;
  for (VolumePhase phase : reconciler::kAllVolumePhases) {
    names.insert(std::string(reconciler::VolumePhaseName(phase)));
  }
  EXPECT_EQ(names.size(), std::size(reconciler::kAllVolumePhases));
  EXPECT_FALSE(names.contains("unknown"));
  EXPECT_EQ(reconciler::VolumePhaseName(VolumePhase::kPublished), "published");
  EXPECT_EQ(reconciler::VolumePhaseName(VolumePhase::kForgetting), "forget");
  EXPECT_TRUE(reconciler::IsFailing(VolumePhase::kError));
  EXPECT_TRUE(reconciler::IsFailing(VolumePhase::kWaiting));
  EXPECT_FALSE(reconciler::IsFailing(VolumePhase::kUncertain));
}

registration::RegistrarStatus Notified(bool registered, const std::string& error) {
  registration::RegistrarStatus status;
  status.notified = true;
  status.registered = registered;
  status.last_error = error;
  status.rejections = registered ? 0 : 1;
  status.socket_path = "/reg/x-reg.sock";
  return status;
}

TEST(RegistrarRecordTest, KeepsTheLastNotificationAndWritesItToTheFile) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/registrar.json";
  registration::RegistrarRecord record(file, "/csi/csi.sock");
  record.Update(Notified(false, "version 9 not supported"));
  EXPECT_FALSE(record.Get().registered());
  EXPECT_EQ(record.Get().rejections(), 1);
  record.Update(Notified(true, ""));
  EXPECT_TRUE(record.Get().registered());
  EXPECT_EQ(record.Get().endpoint(), "/csi/csi.sock");
  auto text = ReadFileToString(file);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, ::testing::HasSubstr("\"registered\": true"));
}

TEST(RegistrarRecordTest, TheInitialStateDoesNotOverwriteANotification) {
  testing::TempDir dir;
  registration::RegistrarRecord record(dir.path() + "/registrar.json", "/csi/csi.sock");
  record.Update(Notified(true, ""));
  record.Initial(registration::RegistrarStatus{});
  EXPECT_TRUE(record.Get().registered());
}

TEST(AgentHealthTest, KubernetesModeIsReadyOnceTheKubeletRegisteredTheDriver) {
  testing::TempDir dir;
  registration::RegistrarRecord record(dir.path() + "/registrar.json", "/csi/csi.sock");
  record.Initial(registration::RegistrarStatus{});
  AgentHealth health(
      {.driver_name = "x.dev",
       .registrar = &record,
       .kubelet_registers = true,
       .driver_volume_problems =
           [] { return std::vector<std::string>{"volume 'v1' is abnormal: SessionGone"}; },
       .manifest_problem = nullptr});
  EXPECT_EQ(health.Ready().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(health.Ready().message(), ::testing::HasSubstr("has not registered"));
  record.Update(Notified(false, "bad socket"));
  EXPECT_THAT(health.Ready().message(), ::testing::HasSubstr("registration rejected: bad socket"));
  record.Update(Notified(true, ""));
  EXPECT_TRUE(health.Ready().ok()) << health.Ready() << ": a broken volume leaves it ready";
  EXPECT_TRUE(health.Live().ok());
  EXPECT_EQ(health.Summary(), "serving");
  EXPECT_THAT(health.VolumeProblems(),
              ::testing::ElementsAre("volume 'v1' is abnormal: SessionGone"));
}

// A standalone agent that watches no plugins (one serving a driver into another's registration
// directory) has no kubelet to wait for: it is ready once it serves, registered or not.
TEST(AgentHealthTest, StandaloneWithoutAWatcherIsReadyWithoutARegistration) {
  testing::TempDir dir;
  registration::RegistrarRecord record(dir.path() + "/registrar.json", "/csi/csi.sock");
  record.Initial(registration::RegistrarStatus{});
  AgentHealth health({.driver_name = "x.dev",
                      .registrar = &record,
                      .kubelet_registers = false,
                      .driver_volume_problems = nullptr,
                      .manifest_problem = nullptr});

  EXPECT_TRUE(health.Ready().ok()) << health.Ready();
  EXPECT_FALSE(record.Get().registered());
}

TEST(AgentHealthTest, StandaloneNeedsTheBuiltInDriverInTheRegistry) {
  testing::TempDir dir;
  registration::RegistrarRecord record(dir.path() + "/registrar.json", "/csi/csi.sock");
  registration::Registry registry;
  AgentHealth health({.driver_name = "x.dev",
                      .registry = &registry,
                      .registrar = &record,
                      .kubelet_registers = false,
                      .driver_volume_problems = nullptr,
                      .manifest_problem = nullptr});
  EXPECT_THAT(health.Ready().message(), ::testing::HasSubstr("'x.dev' is not registered"));
  EXPECT_EQ(health.Summary(), "serving; 0 plugins, 0 unhealthy");

  registration::RegisteredPlugin plugin;
  plugin.set_name("x.dev");
  plugin.set_socket_path("/reg/x-reg.sock");
  plugin.set_healthy(true);
  ASSERT_TRUE(registry.Add(plugin, std::stop_token()).ok());
  EXPECT_TRUE(health.Ready().ok()) << health.Ready();
  EXPECT_EQ(health.Summary(), "serving; 1 plugins, 0 unhealthy");
}

}  // namespace
}  // namespace stagehand::status
