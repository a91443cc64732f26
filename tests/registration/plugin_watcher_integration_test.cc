// The plugin watcher and the registrar over real unix sockets and gRPC: in-process watchers
// against test plugins that misbehave on purpose.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>

#include <absl/strings/match.h>
#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/unique_fd.h"
#include "base/unix_socket.h"
#include "proto/agent.grpc.pb.h"
#include "registration/plugin_info_validation.h"
#include "registration/plugin_watcher.h"
#include "registration/registrar.h"
#include "registration/registry.h"
#include "testbed/stagehand_daemon.h"
#include "tests/registration/fake_plugin.h"
#include "tests/testing/dir_watch.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::registration {
namespace {

using stagehand::testing::FakePlugin;
using stagehand::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kWaitSeconds = 20;

// Wakes waiters on every registry change.
class RegistryObserver {
 public:
  explicit RegistryObserver(Registry& registry) : registry_(registry) {
    registry_.SetListener([this] {
      std::lock_guard lock(mu_);
      ++changes_;
      cv_.notify_all();
    });
  }

  // True once `predicate(registry)` holds, false after kWaitSeconds.
  bool WaitUntil(const std::function<bool(const Registry&)>& predicate) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(kWaitSeconds),
                        [&] { return predicate(registry_); });
  }

 private:
  Registry& registry_;
  std::mutex mu_;
  std::condition_variable cv_;
  int changes_ = 0;
};

bool Registered(const Registry& r, const std::string& name) {
  auto p = r.Find(name);
  return p.has_value() && p->healthy();
}

const RegistrationAttempt* Pending(const state::v1::PluginRegistryStatus& status,
                                   const std::string& socket) {
  for (const auto& attempt : status.pending()) {
    if (attempt.socket_path() == socket) {
      return &attempt;
    }
  }
  return nullptr;
}

class PluginWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!stagehand::testbed::IntegrationEnabled()) {
      GTEST_SKIP() << "integration tests need root and SH_INTEGRATION=1";
    }
    root_ = stagehand::testbed::MakeTempRoot();
    registry_dir_ = root_ + "/reg";
    ASSERT_THAT(MakeDirs(registry_dir_, 0700), IsOk());
  }

  void TearDown() override {
    watcher_.reset();
    if (!root_.empty()) {
      stagehand::testbed::ForceCleanup(root_);
    }
  }

  WatcherOptions Options() const {
    WatcherOptions options;
    options.registry_dir = registry_dir_;
    options.probe_period = std::chrono::milliseconds(100);
    options.backoff.initial = std::chrono::milliseconds(50);
    options.backoff.max = std::chrono::milliseconds(400);
    return options;
  }

  void StartWatcher() {
    auto started = PluginWatcher::Start(Options(), registry_);
    ASSERT_THAT(started.status(), IsOk());
    watcher_ = std::move(*started);
  }

  std::unique_ptr<FakePlugin> Plugin(const std::string& file, const std::string& name) {
    return std::make_unique<FakePlugin>(registry_dir_, root_, file, name);
  }

  std::string root_;
  std::string registry_dir_;
  Registry registry_;
  RegistryObserver observer_{registry_};
  std::unique_ptr<PluginWatcher> watcher_;
};

TEST_F(PluginWatcherTest, RegistersAPluginWithItsNodeInfoAndDeregistersItWhenTheSocketGoes) {
  StartWatcher();
  auto plugin = Plugin("a", "a.test.dev");
  ASSERT_THAT(plugin->ServeEndpoint(), IsOk());
  ASSERT_THAT(plugin->ServeRegistration(), IsOk());

  ASSERT_TRUE(observer_.WaitUntil([](const Registry& r) { return Registered(r, "a.test.dev"); }));
  const auto registered = *registry_.Find("a.test.dev");
  const auto told = plugin->WaitNotifications(1, kWaitSeconds);
  plugin->RemoveRegistration();

  EXPECT_EQ(registered.endpoint(), plugin->endpoint_path());
  EXPECT_EQ(registered.socket_path(), plugin->registration_path());
  EXPECT_EQ(registered.version(), "1.0.0");
  EXPECT_EQ(registered.vendor_version(), "fake-1");
  EXPECT_EQ(registered.node_id(), "fake-node");
  EXPECT_EQ(registered.max_volumes_per_node(), 7);
  EXPECT_EQ(registered.topology().at("topology.fake/zone"), "z1");
  EXPECT_THAT(registered.node_capabilities(), ElementsAre("STAGE_UNSTAGE_VOLUME"));
  ASSERT_EQ(told.size(), 1u);
  EXPECT_TRUE(told[0].registered);
  EXPECT_TRUE(observer_.WaitUntil([](const Registry& r) { return r.List().empty(); }));
}

TEST_F(PluginWatcherTest, RegistersSocketsPresentAtStartAndIgnoresDotfilesAndNonSockets) {
  auto plugin = Plugin("a", "a.test.dev");
  auto hidden = Plugin(".hidden", "hidden.test.dev");
  ASSERT_THAT(plugin->ServeEndpoint(), IsOk());
  ASSERT_THAT(plugin->ServeRegistration(), IsOk());
  ASSERT_THAT(hidden->ServeEndpoint(), IsOk());
  ASSERT_THAT(hidden->ServeRegistration(), IsOk());
  ASSERT_THAT(WriteFileAtomically(registry_dir_ + "/file-reg.sock", "not a socket", 0600), IsOk());

  StartWatcher();
  ASSERT_TRUE(observer_.WaitUntil([](const Registry& r) { return Registered(r, "a.test.dev"); }));
  // A socket created after start is registered too; by then the others were long seen.
  auto late = Plugin("late", "late.test.dev");
  ASSERT_THAT(late->ServeEndpoint(), IsOk());
  ASSERT_THAT(late->ServeRegistration(), IsOk());
  ASSERT_TRUE(
      observer_.WaitUntil([](const Registry& r) { return Registered(r, "late.test.dev"); }));

  const auto status = registry_.Snapshot();
  EXPECT_EQ(status.plugins_size(), 2);
  EXPECT_EQ(status.pending_size(), 0);
  EXPECT_TRUE(hidden->notifications().empty());
}

TEST_F(PluginWatcherTest, RejectsBadGetInfoAnswersWithTheReasonAndRetries) {
  auto bad_version = Plugin("version", "version.test.dev");
  bad_version->info().clear_supported_versions();
  bad_version->info().add_supported_versions("0.3.0");
  auto no_name = Plugin("noname", "");
  auto unreachable = Plugin("unreachable", "unreachable.test.dev");  // Endpoint not served.
  for (auto* p : {bad_version.get(), no_name.get(), unreachable.get()}) {
    ASSERT_THAT(p->ServeRegistration(), IsOk());
  }
  ASSERT_THAT(bad_version->ServeEndpoint(), IsOk());
  ASSERT_THAT(no_name->ServeEndpoint(), IsOk());

  StartWatcher();
  const auto version_told = bad_version->WaitNotifications(2, kWaitSeconds);
  const auto name_told = no_name->WaitNotifications(2, kWaitSeconds);
  const auto unreachable_told = unreachable->WaitNotifications(2, kWaitSeconds);

  ASSERT_GE(version_told.size(), 2u) << "a rejected plugin is retried";
  EXPECT_FALSE(version_told[0].registered);
  EXPECT_THAT(version_told[0].error, HasSubstr("1.x"));
  ASSERT_GE(name_told.size(), 2u);
  EXPECT_FALSE(name_told[1].registered);
  EXPECT_THAT(name_told[1].error, HasSubstr("name is empty"));
  ASSERT_GE(unreachable_told.size(), 2u);
  EXPECT_FALSE(unreachable_told[0].registered);
  EXPECT_THAT(unreachable_told[0].error, HasSubstr(unreachable->endpoint_path()));
  const auto status = registry_.Snapshot();
  EXPECT_EQ(status.plugins_size(), 0);
  const auto* pending = Pending(status, unreachable->registration_path());
  ASSERT_NE(pending, nullptr);
  EXPECT_THAT(pending->last_error(), HasSubstr("nothing listens"));
  EXPECT_EQ(pending->plugin_name(), "unreachable.test.dev");
  EXPECT_GE(pending->failures(), 1);

  // Once its endpoint comes up, the retry registers it.
  ASSERT_THAT(unreachable->ServeEndpoint(), IsOk());
  EXPECT_TRUE(
      observer_.WaitUntil([](const Registry& r) { return Registered(r, "unreachable.test.dev"); }));
  EXPECT_EQ(Pending(registry_.Snapshot(), unreachable->registration_path()), nullptr);
}

TEST_F(PluginWatcherTest, AStaleSocketWithoutListenerDoesNotBlockTheOthers) {
  // A socket file nobody listens on, as a crashed plugin leaves behind.
  const std::string stale = registry_dir_ + "/stale-reg.sock";
  {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, stale.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }
  StartWatcher();
  auto plugin = Plugin("a", "a.test.dev");
  ASSERT_THAT(plugin->ServeEndpoint(), IsOk());
  ASSERT_THAT(plugin->ServeRegistration(), IsOk());

  ASSERT_TRUE(observer_.WaitUntil([](const Registry& r) { return Registered(r, "a.test.dev"); }));
  ASSERT_TRUE(observer_.WaitUntil(
      [&](const Registry& r) { return Pending(r.Snapshot(), stale) != nullptr; }));
  EXPECT_THAT(Pending(registry_.Snapshot(), stale)->last_error(), HasSubstr("refused"));
}

TEST_F(PluginWatcherTest, RemovingTheSocketDuringTheHandshakeLeavesNoRegistration) {
  auto slow = Plugin("slow", "slow.test.dev");
  slow->BlockNodeGetInfo();
  ASSERT_THAT(slow->ServeEndpoint(), IsOk());
  ASSERT_THAT(slow->ServeRegistration(), IsOk());
  StartWatcher();
  ASSERT_TRUE(slow->WaitNodeGetInfoEntered(kWaitSeconds));

  slow->RemoveRegistration();
  slow->Release();
  // Events are handled in order: once a plugin created after the removal is registered, the
  // removal has been handled too.
  auto sentinel = Plugin("sentinel", "sentinel.test.dev");
  ASSERT_THAT(sentinel->ServeEndpoint(), IsOk());
  ASSERT_THAT(sentinel->ServeRegistration(), IsOk());
  ASSERT_TRUE(
      observer_.WaitUntil([](const Registry& r) { return Registered(r, "sentinel.test.dev"); }));

  const auto status = registry_.Snapshot();
  EXPECT_FALSE(registry_.Find("slow.test.dev").has_value());
  EXPECT_EQ(status.plugins_size(), 1);
  EXPECT_EQ(Pending(status, slow->registration_path()), nullptr);
  for (const auto& n : slow->notifications()) {
    EXPECT_FALSE(n.registered);
  }
}

TEST_F(PluginWatcherTest, MarksAPluginUnhealthyWhenProbeFailsAndHealthyWhenItAnswers) {
  auto plugin = Plugin("a", "a.test.dev");
  ASSERT_THAT(plugin->ServeEndpoint(), IsOk());
  ASSERT_THAT(plugin->ServeRegistration(), IsOk());
  StartWatcher();
  ASSERT_TRUE(observer_.WaitUntil([](const Registry& r) { return Registered(r, "a.test.dev"); }));

  plugin->SetReady(false);
  ASSERT_TRUE(observer_.WaitUntil([](const Registry& r) {
    auto p = r.Find("a.test.dev");
    return p && !p->healthy();
  }));
  EXPECT_THAT(registry_.Find("a.test.dev")->last_error(), HasSubstr("not ready"));
  plugin->StopEndpoint();
  ASSERT_TRUE(observer_.WaitUntil([](const Registry& r) {
    auto p = r.Find("a.test.dev");
    return p && !p->healthy() && !absl::StrContains(p->last_error(), "ready");
  }));
  plugin->SetReady(true);
  ASSERT_THAT(plugin->ServeEndpoint(), IsOk());

  EXPECT_TRUE(observer_.WaitUntil([](const Registry& r) { return Registered(r, "a.test.dev"); }));
  EXPECT_EQ(registry_.Find("a.test.dev")->last_error(), "");
}

TEST_F(PluginWatcherTest, ASecondSocketClaimingAHealthyDriverIsRejected) {
  auto first = Plugin("first", "same.test.dev");
  ASSERT_THAT(first->ServeEndpoint(), IsOk());
  ASSERT_THAT(first->ServeRegistration(), IsOk());
  StartWatcher();
  ASSERT_TRUE(
      observer_.WaitUntil([](const Registry& r) { return Registered(r, "same.test.dev"); }));

  auto second = Plugin("second", "same.test.dev");
  ASSERT_THAT(second->ServeEndpoint(), IsOk());
  ASSERT_THAT(second->ServeRegistration(), IsOk());
  const auto told = second->WaitNotifications(1, kWaitSeconds);

  ASSERT_GE(told.size(), 1u);
  EXPECT_FALSE(told[0].registered);
  EXPECT_THAT(told[0].error, HasSubstr("already registered"));
  EXPECT_THAT(told[0].error, HasSubstr(first->registration_path()));
  EXPECT_EQ(registry_.Find("same.test.dev")->socket_path(), first->registration_path());
}

TEST_F(PluginWatcherTest, ASecondRegistrarForTheSameDriverLeavesTheFirstOnesSocket) {
  auto endpoint = std::make_unique<FakePlugin>(root_, root_, "dup", "dup.test.dev");
  ASSERT_THAT(endpoint->ServeEndpoint(), IsOk());
  RegistrarOptions options;
  options.registration_dir = registry_dir_;
  options.driver_name = "dup.test.dev";
  options.endpoint = endpoint->endpoint_path();
  auto first = Registrar::Start(options, nullptr);
  ASSERT_THAT(first.status(), IsOk());
  const std::string socket = registry_dir_ + "/dup.test.dev-reg.sock";
  ASSERT_THAT(CheckListening(socket), IsOk());

  auto second = Registrar::Start(options, nullptr);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  // The refused one must not take the live socket of the first with it.
  EXPECT_THAT(CheckListening(socket), IsOk());
}

// Our registrar, rejected because another healthy socket holds its name, re-creates its socket
// with backoff and is registered once the other one is gone.
TEST_F(PluginWatcherTest, RejectedRegistrarRecreatesItsSocketAndRegistersLater) {
  auto squatter = Plugin("squatter", "ours.test.dev");
  ASSERT_THAT(squatter->ServeEndpoint(), IsOk());
  ASSERT_THAT(squatter->ServeRegistration(), IsOk());
  StartWatcher();
  ASSERT_TRUE(
      observer_.WaitUntil([](const Registry& r) { return Registered(r, "ours.test.dev"); }));
  auto endpoint = std::make_unique<FakePlugin>(root_, root_, "ours", "ours.test.dev");
  ASSERT_THAT(endpoint->ServeEndpoint(), IsOk());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RegistrarStatus> seen;
  RegistrarOptions options;
  options.registration_dir = registry_dir_;
  options.driver_name = "ours.test.dev";
  options.endpoint = endpoint->endpoint_path();
  options.backoff.initial = std::chrono::milliseconds(50);
  options.backoff.max = std::chrono::milliseconds(200);

  auto registrar = Registrar::Start(options, [&](const RegistrarStatus& s) {
    std::lock_guard lock(mu);
    seen.push_back(s);
    cv.notify_all();
  });
  ASSERT_THAT(registrar.status(), IsOk());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(
        cv.wait_for(lock, std::chrono::seconds(kWaitSeconds), [&] { return !seen.empty(); }));
  }
  const auto rejected = (*registrar)->status();
  squatter->RemoveRegistration();
  ASSERT_TRUE(observer_.WaitUntil([&](const Registry& r) {
    auto p = r.Find("ours.test.dev");
    return p && p->socket_path() == (*registrar)->socket_path();
  }));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(kWaitSeconds),
                            [&] { return seen.back().registered; }));
  }

  EXPECT_FALSE(rejected.registered);
  EXPECT_GE(rejected.rejections, 1);
  EXPECT_THAT(rejected.last_error, HasSubstr("already registered"));
  EXPECT_EQ(registry_.Find("ours.test.dev")->endpoint(), endpoint->endpoint_path());
  EXPECT_TRUE((*registrar)->status().last_error.empty());
  registrar->reset();
  EXPECT_NE(access((registry_dir_ + "/ours.test.dev-reg.sock").c_str(), F_OK), 0)
      << "the registrar removes its socket on shutdown";
}

}  // namespace
}  // namespace stagehand::registration
