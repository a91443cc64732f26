#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/daemon.h"

namespace stagehand::agent {
namespace {

using ::testing::HasSubstr;

DaemonOptions Standalone() {
  DaemonOptions o;
  o.state_dir = "/var/lib/sh";
  o.runtime_dir = "/run/sh";
  return o;
}

DaemonOptions Kubernetes() {
  DaemonOptions o = Standalone();
  o.mode = Mode::kKubernetes;
  o.kubelet_dir = "/var/lib/k0s/kubelet";
  return o;
}

TEST(ResolveDaemonOptionsTest, StandaloneDefaultsGoUnderTheStateDir) {
  auto o = ResolveDaemonOptions(Standalone(), "node-1");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->node_id, "node-1");
  EXPECT_EQ(o->csi_endpoint, "unix:///var/lib/sh/plugins/iscsi.stagehand.dev/csi.sock");
  EXPECT_EQ(CsiSocketPath(*o), "/var/lib/sh/plugins/iscsi.stagehand.dev/csi.sock");
  EXPECT_EQ(o->registration_dir, "/var/lib/sh/plugins_registry");
  EXPECT_EQ(o->agent_socket, "/run/sh/agent.sock");
  EXPECT_TRUE(o->watch_plugins);
  EXPECT_EQ(o->session_bundle_dir, "") << "standalone runs the session binary in place";
}

TEST(ResolveDaemonOptionsTest, KubernetesDefaultsGoUnderTheKubeletDir) {
  auto o = ResolveDaemonOptions(Kubernetes(), "node-1");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->csi_endpoint, "unix:///var/lib/k0s/kubelet/plugins/iscsi.stagehand.dev/csi.sock");
  EXPECT_EQ(o->registration_dir, "/var/lib/k0s/kubelet/plugins_registry");
  EXPECT_EQ(o->session_bundle_dir, "/var/lib/k0s/kubelet/plugins/iscsi.stagehand.dev/bin");
  EXPECT_FALSE(o->watch_plugins) << "the kubelet is the watcher";
}

TEST(ResolveDaemonOptionsTest, GivenValuesWin) {
  DaemonOptions in = Kubernetes();
  in.node_id = "worker-3";
  in.csi_endpoint = "unix:///csi/csi.sock";
  in.registration_dir = "/registry";
  in.agent_socket = "/tmp/agent.sock";
  in.session_bundle_dir = "/opt/sh";
  auto o = ResolveDaemonOptions(in, "ignored");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->node_id, "worker-3");
  EXPECT_EQ(CsiSocketPath(*o), "/csi/csi.sock");
  EXPECT_EQ(o->registration_dir, "/registry");
  EXPECT_EQ(o->agent_socket, "/tmp/agent.sock");
  EXPECT_EQ(o->session_bundle_dir, "/opt/sh");
}

TEST(ResolveDaemonOptionsTest, RefusesWhatCannotWorkWithTheFlagToFix) {
  struct Case {
    const char* name;
    DaemonOptions options;
    const char* want;
  };

  std::vector<Case> cases;
  {
    DaemonOptions o = Kubernetes();
    o.node_id = "$(NODE_NAME)";
    cases.push_back({"unexpanded node id", o, "unexpanded variable reference"});
  }
  {
    DaemonOptions o = Kubernetes();
    o.node_id = "Node_1";
    cases.push_back({"not a node name", o, "not a valid Kubernetes node name"});
  }
  {
    DaemonOptions o = Kubernetes();
    o.kubelet_dir = "var/lib/kubelet";
    cases.push_back({"relative kubelet dir", o, "--kubelet-dir"});
  }
  {
    DaemonOptions o = Standalone();
    o.registration_dir = "/a/../b";
    cases.push_back({"unclean registration dir", o, "--registration-dir"});
  }
  {
    DaemonOptions o = Standalone();
    o.csi_endpoint = "tcp://127.0.0.1:1";
    cases.push_back({"tcp endpoint", o, "--csi-endpoint"});
  }
  {
    DaemonOptions o = Standalone();
    o.session_launcher = "cron";
    cases.push_back({"launcher", o, "--session-launcher 'cron'"});
  }
  {
    DaemonOptions o = Standalone();
    o.iscsi_transport = "rdma";
    cases.push_back({"transport", o, "--iscsi-transport 'rdma'"});
  }
  {
    DaemonOptions o = Standalone();
    o.agent_socket = "/var/lib/sh/plugins/iscsi.stagehand.dev/csi.sock";
    cases.push_back({"agent socket is the CSI socket", o, "--agent-socket"});
  }
  {
    DaemonOptions o = Standalone();
    o.registration_dir = "/run/reg";
    o.csi_endpoint = "unix:///run/reg/iscsi.stagehand.dev-reg.sock";
    cases.push_back({"registration socket is the CSI socket", o, "--registration-dir"});
  }
  for (const Case& c : cases) {
    auto o = ResolveDaemonOptions(c.options, "node-1");
    ASSERT_FALSE(o.ok()) << c.name;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(o.status().message(), HasSubstr(c.want)) << c.name;
  }
}

TEST(ResolveDaemonOptionsTest, AHostNameThatIsNoNodeNameNeedsANodeIdInKubernetes) {
  auto o = ResolveDaemonOptions(Kubernetes(), "My_Laptop");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExitCodeTest, ConfigurationErrorsAreTwo) {
  EXPECT_EQ(ExitCode(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCode(absl::InvalidArgumentError("bad flag")), 2);
  EXPECT_EQ(ExitCode(absl::FailedPreconditionError("lock held")), 1);
  EXPECT_EQ(ExitCode(absl::UnavailableError("no bus")), 1);
}

}  // namespace
}  // namespace stagehand::agent
