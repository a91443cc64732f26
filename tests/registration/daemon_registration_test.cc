// Real `stagehand` processes registering with each other through the plugin-registration
// protocol, standalone and in Kubernetes mode.

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
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::registration {
namespace {

using stagehand::testing::IsOk;
using ::testing::ElementsAre;

constexpr int kWaitSeconds = 20;

// Waits (inotify, no sleeps) until the JSON file `path` parses and satisfies `predicate`.
template <typename Message>
bool WaitForJson(const std::string& path, const std::function<bool(const Message&)>& predicate,
                 Message* out = nullptr) {
  return stagehand::testing::WaitUntilInDir(
      path.substr(0, path.rfind('/')), IN_MOVED_TO | IN_CLOSE_WRITE,
      std::chrono::seconds(kWaitSeconds), [&] {
        Message message;
        auto text = ReadFileToString(path);
        if (!text.ok() || !google::protobuf::util::JsonStringToMessage(*text, &message).ok() ||
            !predicate(message)) {
          return false;
        }
        if (out != nullptr) {
          *out = message;
        }
        return true;
      });
}

const state::v1::RegisteredPlugin* FindPlugin(const state::v1::PluginRegistryStatus& s,
                                              const std::string& name) {
  for (const auto& p : s.plugins()) {
    if (p.name() == name) {
      return &p;
    }
  }
  return nullptr;
}

class DaemonRegistrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!stagehand::testbed::IntegrationEnabled()) {
      GTEST_SKIP() << "integration tests need root and SH_INTEGRATION=1";
    }
    root_ = stagehand::testbed::MakeTempRoot();
    second_root_ = stagehand::testbed::MakeTempRoot();
  }

  void TearDown() override {
    second_.reset();
    first_.reset();
    for (const auto& r : {root_, second_root_}) {
      if (!r.empty()) {
        stagehand::testbed::ForceCleanup(r);
      }
    }
  }

  std::string root_;
  std::string second_root_;
  std::unique_ptr<stagehand::testbed::StagehandDaemon> first_;
  std::unique_ptr<stagehand::testbed::StagehandDaemon> second_;
};

TEST_F(DaemonRegistrationTest, StandaloneDaemonFindsItsOwnDriverThroughItsRegistrationSocket) {
  first_ = std::make_unique<stagehand::testbed::StagehandDaemon>(
      root_, std::vector<std::string>{"--plugin-probe-period=0.2"});
  ASSERT_THAT(first_->Start(), IsOk());
  const std::string plugins = first_->state_dir() + "/plugins.json";

  state::v1::PluginRegistryStatus status;
  ASSERT_TRUE(WaitForJson<state::v1::PluginRegistryStatus>(
      plugins, [](const auto& s) { return FindPlugin(s, "iscsi.stagehand.dev") != nullptr; },
      &status));
  state::v1::CsiNode node;
  ASSERT_TRUE(WaitForJson<state::v1::CsiNode>(
      first_->state_dir() + "/csinode.json", [](const auto& n) { return n.drivers_size() == 1; },
      &node));

  const auto* self = FindPlugin(status, "iscsi.stagehand.dev");
  EXPECT_TRUE(self->healthy());
  EXPECT_EQ(self->endpoint(), first_->socket_path());
  EXPECT_EQ(self->socket_path(),
            first_->state_dir() + "/plugins_registry/iscsi.stagehand.dev-reg.sock");
  EXPECT_EQ(self->node_id(), "it-node");
  EXPECT_THAT(self->node_capabilities(), ::testing::Contains("STAGE_UNSTAGE_VOLUME"));
  EXPECT_EQ(node.drivers(0).name(), "iscsi.stagehand.dev");
  EXPECT_EQ(node.drivers(0).node_id(), "it-node");
  EXPECT_EQ(first_->Stop(), 0);
  EXPECT_NE(access(self->socket_path().c_str(), F_OK), 0) << "socket removed on shutdown";
}

TEST_F(DaemonRegistrationTest, ASecondDriverIsRegisteredAndDeregisteredAsItsSocketComesAndGoes) {
  first_ = std::make_unique<stagehand::testbed::StagehandDaemon>(
      root_, std::vector<std::string>{"--plugin-probe-period=0.2"});
  ASSERT_THAT(first_->Start(), IsOk());
  const std::string registry_dir = first_->state_dir() + "/plugins_registry";
  const std::string plugins = first_->state_dir() + "/plugins.json";
  auto make_second = [&] {
    return std::make_unique<stagehand::testbed::StagehandDaemon>(
        second_root_,
        std::vector<std::string>{"--driver-name=second.stagehand.dev",
                                 "--registration-dir=" + registry_dir, "--no-watch-plugins"});
  };
  auto has_second = [](bool healthy) {
    return [healthy](const state::v1::PluginRegistryStatus& s) {
      const auto* p = FindPlugin(s, "second.stagehand.dev");
      return p != nullptr && p->healthy() == healthy;
    };
  };

  second_ = make_second();
  ASSERT_THAT(second_->Start(), IsOk());
  ASSERT_TRUE(WaitForJson<state::v1::PluginRegistryStatus>(plugins, has_second(true)));
  // A crash leaves the socket behind: the plugin stays registered but turns unhealthy.
  second_->Kill();
  ASSERT_TRUE(WaitForJson<state::v1::PluginRegistryStatus>(plugins, has_second(false)));
  // The restarted driver replaces its stale socket, which registers it anew.
  second_ = make_second();
  ASSERT_THAT(second_->Start(), IsOk());
  ASSERT_TRUE(WaitForJson<state::v1::PluginRegistryStatus>(plugins, has_second(true)));
  // A clean stop removes the socket, which deregisters the driver.
  EXPECT_EQ(second_->Stop(), 0);

  state::v1::PluginRegistryStatus status;
  EXPECT_TRUE(WaitForJson<state::v1::PluginRegistryStatus>(
      plugins,
      [](const auto& s) {
        return FindPlugin(s, "second.stagehand.dev") == nullptr &&
               FindPlugin(s, "iscsi.stagehand.dev") != nullptr && s.pending_size() == 0;
      },
      &status));
  EXPECT_EQ(status.plugins_size(), 1);
}

// Waits (inotify on the parent, no sleeps) until `path` exists with an inode other than
// `not_inode`; returns its inode, or 0 on timeout.
ino_t WaitForSocket(const std::string& path, ino_t not_inode = 0) {
  ino_t inode = 0;
  stagehand::testing::WaitUntilInDir(
      path.substr(0, path.rfind('/')), IN_CREATE | IN_MOVED_TO, std::chrono::seconds(kWaitSeconds),
      [&] {
        struct stat st {};
        if (stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino != not_inode) {
          inode = st.st_ino;
        }
        return inode != 0;
      });
  return inode;
}

// The HTTP status code of GET http://127.0.0.1:<port><path>, or -1.
int HttpStatus(int port, const std::string& path) {
  const auto response = stagehand::testing::HttpGet(port, path);
  return response ? response->code : -1;
}

// The metrics port of the daemon whose runtime dir is `runtime_dir` (agent API).
int MetricsPort(const std::string& runtime_dir) {
  auto agent = stagehand::agent::v1::Agent::NewStub(grpc::CreateChannel(
      "unix:" + runtime_dir + "/agent.sock", grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context.set_wait_for_ready(true);
  stagehand::agent::v1::AgentStatus status;
  if (!agent->GetStatus(&context, stagehand::agent::v1::GetStatusRequest(), &status).ok()) {
    return -1;
  }
  return status.metrics_port();
}

// Records IN_CREATE events of one file name in a directory from construction on (a re-created
// socket may well get the inode number of the one it replaces, so inodes cannot tell).
class CreationWatch {
 public:
  explicit CreationWatch(const std::string& path)
      : name_(path.substr(path.rfind('/') + 1)), fd_(inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    inotify_add_watch(fd_.Get(), path.substr(0, path.rfind('/')).c_str(), IN_CREATE);
  }

  // True once the file has been created again (inotify, no sleeps), false after kWaitSeconds.
  bool Wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kWaitSeconds);
    while (std::chrono::steady_clock::now() < deadline) {
      alignas(inotify_event) std::array<char, 4096> buffer{};
      const ssize_t n = read(fd_.Get(), buffer.data(), buffer.size());
      for (ssize_t offset = 0; offset < n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer.data() + offset);
        offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        if (event->len > 0 && name_ == event->name) {
          return true;
        }
      }
      pollfd p{fd_.Get(), POLLIN, 0};
      (void)poll(&p, 1, 1000);
    }
    return false;
  }

 private:
  std::string name_;
  UniqueFd fd_;
};

// The test plays the kubelet: it dials the registration socket in Kubernetes mode, checks what
// GetInfo says, rejects the registration once (the socket must be re-created) and accepts it.
TEST_F(DaemonRegistrationTest, KubernetesModeRegistrarAnswersTheKubeletAndRecreatesOnRejection) {
  const std::string kubelet_path = "/var/lib/kubelet/plugins/iscsi.stagehand.dev/csi.sock";
  const std::string registry_dir = root_ + "/kreg";
  first_ = std::make_unique<stagehand::testbed::StagehandDaemon>(
      root_, std::vector<std::string>{"--mode=kubernetes", "--registration-dir=" + registry_dir,
                                      "--kubelet-registration-path=" + kubelet_path});
  ASSERT_THAT(first_->Start(), IsOk());
  const std::string socket = registry_dir + "/iscsi.stagehand.dev-reg.sock";
  const std::string state_file = first_->state_dir() + "/registrar.json";
  const ino_t first_inode = WaitForSocket(socket);
  ASSERT_NE(first_inode, 0u);

  const int metrics_port = MetricsPort(first_->runtime_dir());
  ASSERT_GT(metrics_port, 0);
  EXPECT_EQ(HttpStatus(metrics_port, "/healthz"), 200);
  EXPECT_EQ(HttpStatus(metrics_port, "/readyz"), 503)
      << "not ready before the kubelet registers it";

  std::stop_source never;
  auto channel = DialUnix(socket, std::chrono::seconds(10));
  ASSERT_THAT(channel.status(), IsOk());
  auto info = GetInfo(*channel, std::chrono::seconds(1), never.get_token());
  ASSERT_THAT(info.status(), IsOk());
  EXPECT_EQ(info->type(), "CSIPlugin");
  EXPECT_EQ(info->name(), "iscsi.stagehand.dev");
  EXPECT_EQ(info->endpoint(), kubelet_path);
  EXPECT_THAT(info->supported_versions(), ElementsAre("1.0.0"));
  EXPECT_THAT(ValidatePluginInfo(*info), IsOk());

  CreationWatch recreated(socket);
  ASSERT_THAT(NotifyRegistrationStatus(*channel, false, "kubelet: version mismatch",
                                       std::chrono::seconds(5), never.get_token()),
              IsOk());
  state::v1::RegistrarState rejected;
  ASSERT_TRUE(WaitForJson<state::v1::RegistrarState>(
      state_file, [](const auto& r) { return r.rejections() == 1; }, &rejected));
  ASSERT_TRUE(recreated.Wait()) << "a rejected registrar re-creates its socket";
  ASSERT_NE(WaitForSocket(socket), 0u);
  auto again = DialUnix(socket, std::chrono::seconds(10));
  ASSERT_THAT(again.status(), IsOk());
  ASSERT_THAT(
      NotifyRegistrationStatus(*again, true, "", std::chrono::seconds(5), never.get_token()),
      IsOk());
  state::v1::RegistrarState accepted;
  ASSERT_TRUE(WaitForJson<state::v1::RegistrarState>(
      state_file, [](const auto& r) { return r.registered(); }, &accepted));

  EXPECT_EQ(HttpStatus(metrics_port, "/readyz"), 200) << "ready once registered";
  EXPECT_FALSE(rejected.registered());
  EXPECT_EQ(rejected.last_error(), "kubelet: version mismatch");
  EXPECT_EQ(rejected.endpoint(), kubelet_path);
  EXPECT_EQ(accepted.rejections(), 0);
  EXPECT_EQ(accepted.last_error(), "");
  EXPECT_NE(access((first_->state_dir() + "/plugins.json").c_str(), F_OK), 0)
      << "no plugin watcher in Kubernetes mode";
  *channel = nullptr;  // Idle connections hold up the daemon's gRPC shutdown.
  *again = nullptr;
  EXPECT_EQ(first_->Stop(), 0);
  EXPECT_NE(access(socket.c_str(), F_OK), 0) << "socket removed on shutdown";
}

}  // namespace
}  // namespace stagehand::registration
