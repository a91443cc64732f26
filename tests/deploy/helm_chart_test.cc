// deploy/helm/stagehand: helm lint, and helm template with the default values (which must give
// the objects deploy/kubernetes holds) and with every value changed (which must show in the
// objects). Helm is built by scripts/install-test-tools into $STAGEHAND_TEST_TOOLS (default
// ~/.cache/stagehand-tools), like the other tools the field publishes as Go modules.

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/subprocess.h"

#ifndef SH_SOURCE_DIR
#error "SH_SOURCE_DIR must be defined (the project source directory)"
#endif

namespace stagehand {
namespace {

using ::testing::Contains;
using ::testing::IsSupersetOf;
using ::testing::Not;

std::string SourcePath(const std::string& relative) {
  return std::string(SH_SOURCE_DIR) + "/" + relative;
}

std::string ToolsDir() {
  const char* dir = getenv("STAGEHAND_TEST_TOOLS");  // NOLINT(concurrency-mt-unsafe): test setup.
  const char* home = getenv("HOME");                 // NOLINT(concurrency-mt-unsafe): test setup.
  return dir != nullptr ? std::string(dir)
                        : std::string(home != nullptr ? home : "/root") + "/.cache/stagehand-tools";
}

std::string HelmBinary() {
  return ToolsDir() + "/bin/helm";
}

// Helm 3, which the chart supports too.
std::string Helm3Binary() {
  return ToolsDir() + "/helm3/helm";
}

// Runs helm (`binary`: Helm 4 unless given) with `args`; its output, or a failure of the test.
std::string Helm(const std::vector<std::string>& args, const std::string& binary = HelmBinary()) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunProcess(argv, RunOptions{std::chrono::seconds(60)});
  if (!r.ok()) {
    ADD_FAILURE() << ArgvToString(argv) << ": " << r.status()
                  << " (helm is built by scripts/install-test-tools)";
    return "";
  }
  EXPECT_EQ(r->exit_code, 0) << ArgvToString(argv) << ":\n" << r->output;
  return r->output;
}

// The rendered objects by "Kind/name".
std::map<std::string, YAML::Node> Objects(const std::vector<YAML::Node>& docs) {
  std::map<std::string, YAML::Node> out;
  for (const YAML::Node& doc : docs) {
    if (doc.IsMap()) {
      out[doc["kind"].as<std::string>("") + "/" + doc["metadata"]["name"].as<std::string>("")] =
          doc;
    }
  }
  return out;
}

std::map<std::string, YAML::Node> Render(const std::vector<std::string>& extra,
                                         const std::string& binary = HelmBinary()) {
  std::vector<std::string> args = {"template", "stagehand", SourcePath("deploy/helm/stagehand"),
                                   "--namespace", "stagehand-system"};
  args.insert(args.end(), extra.begin(), extra.end());
  return Objects(YAML::LoadAll(Helm(args, binary)));
}

// A node as one string: maps with sorted keys, scalars as their text (quoted or not).
std::string Canonical(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      std::map<std::string, std::string> entries;
      for (const auto& kv : node) {
        entries[kv.first.as<std::string>()] = Canonical(kv.second);
      }
      std::vector<std::string> parts;
      for (const auto& [k, v] : entries) {
        parts.push_back(absl::StrCat(k, ": ", v));
      }
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    }
    case YAML::NodeType::Sequence: {
      std::vector<std::string> parts;
      for (const YAML::Node& item : node) {
        parts.push_back(Canonical(item));
      }
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case YAML::NodeType::Scalar:
      return node.Scalar();
    default:
      return "~";
  }
}

// Drops the labels Helm's conventions add (chart, release, version, manager) from `labels`.
void DropHelmLabels(YAML::Node labels) {
  for (const char* key : {"helm.sh/chart", "app.kubernetes.io/managed-by",
                          "app.kubernetes.io/instance", "app.kubernetes.io/version"}) {
    if (labels.IsMap()) {
      labels.remove(key);
    }
  }
}

// The object without what only Helm adds: its labels, and a labels map left empty.
std::string WithoutHelmLabels(YAML::Node object) {
  object = YAML::Clone(object);
  DropHelmLabels(object["metadata"]["labels"]);
  if (object["metadata"]["labels"] && object["metadata"]["labels"].size() == 0) {
    object["metadata"].remove("labels");
  }
  if (object["kind"].as<std::string>("") == "DaemonSet") {
    DropHelmLabels(object["spec"]["selector"]["matchLabels"]);
    DropHelmLabels(object["spec"]["template"]["metadata"]["labels"]);
  }
  return Canonical(object);
}

TEST(HelmChartTest, LintPassesWithTheDefaultAndOtherValues) {
  Helm({"lint", "--strict", SourcePath("deploy/helm/stagehand")});
  Helm({"lint", "--strict", SourcePath("deploy/helm/stagehand"), "-f",
        SourcePath("tests/deploy/helm-values.yaml")});
}

// Helm 3 lints the chart and renders the very objects Helm 4 renders, with the default values
// and with others. (Helm 3's template assumes Kubernetes v1.20 without --kube-version, older than
// the chart's kubeVersion; an install asks the cluster.)
TEST(HelmChartTest, Helm3RendersWhatHelm4Renders) {
  Helm({"lint", "--strict", SourcePath("deploy/helm/stagehand")}, Helm3Binary());
  for (const std::vector<std::string>& values :
       {std::vector<std::string>{"--kube-version", "v1.34.0"},
        {"--kube-version", "v1.34.0", "-f", SourcePath("tests/deploy/helm-values.yaml")}}) {
    const std::map<std::string, YAML::Node> four = Render(values);
    const std::map<std::string, YAML::Node> three = Render(values, Helm3Binary());
    ASSERT_FALSE(four.empty());
    std::vector<std::string> four_names;
    std::vector<std::string> three_names;
    for (const auto& [name, object] : four) {
      four_names.push_back(name);
    }
    for (const auto& [name, object] : three) {
      three_names.push_back(name);
    }
    ASSERT_EQ(three_names, four_names) << ::testing::PrintToString(values);
    for (const auto& [name, object] : four) {
      EXPECT_EQ(Canonical(three.at(name)), Canonical(object)) << name;
    }
  }
}

// One source of truth: the chart with its defaults renders the kustomize base's objects (but
// the Namespace, which `helm install --create-namespace` makes), with the kustomization's image.
TEST(HelmChartTest, TheDefaultsRenderTheKustomizeBase) {
  const std::map<std::string, YAML::Node> chart = Render({});
  std::vector<YAML::Node> base =
      YAML::LoadAllFromFile(SourcePath("deploy/kubernetes/csidriver.yaml"));
  for (const YAML::Node& doc :
       YAML::LoadAllFromFile(SourcePath("deploy/kubernetes/daemonset.yaml"))) {
    if (doc["kind"].as<std::string>("") != "Namespace") {
      base.push_back(doc);
    }
  }
  const std::map<std::string, YAML::Node> kustomize = Objects(base);
  const YAML::Node image =
      YAML::LoadFile(SourcePath("deploy/kubernetes/kustomization.yaml"))["images"][0];

  ASSERT_EQ(chart.size(), kustomize.size());
  for (const auto& [name, object] : kustomize) {
    ASSERT_EQ(chart.count(name), 1U) << name << " is in deploy/kubernetes, not in the chart";
    EXPECT_EQ(WithoutHelmLabels(chart.at(name)), WithoutHelmLabels(object))
        << name << " differs between deploy/helm/stagehand and deploy/kubernetes";
  }
  EXPECT_EQ(
      chart.at("DaemonSet/stagehand-node")["spec"]["template"]["spec"]["containers"][0]["image"]
          .as<std::string>(),
      image["name"].as<std::string>() + ":" + image["newTag"].as<std::string>());
}

TEST(HelmChartTest, EveryValueShowsInTheObjects) {
  const std::map<std::string, YAML::Node> chart =
      Render({"-f", SourcePath("tests/deploy/helm-values.yaml")});
  ASSERT_EQ(chart.count("CSIDriver/iscsi.example.com"), 1U);
  ASSERT_EQ(chart.count("DaemonSet/stagehand-node"), 1U);
  const YAML::Node ds = chart.at("DaemonSet/stagehand-node");
  const YAML::Node pod = ds["spec"]["template"]["spec"];
  const YAML::Node container = pod["containers"][0];
  std::vector<std::string> args;
  for (const YAML::Node& a : container["args"]) {
    args.push_back(a.as<std::string>());
  }

  EXPECT_EQ(container["image"].as<std::string>(),
            "registry.example.com/storage/stagehand:0.2.0-rc1");
  EXPECT_EQ(container["imagePullPolicy"].as<std::string>(), "Always");
  EXPECT_EQ(pod["imagePullSecrets"][0]["name"].as<std::string>(), "registry-login");
  EXPECT_THAT(args,
              IsSupersetOf({"--kubelet-dir=/var/snap/microk8s/common/var/lib/kubelet",
                            "--driver-name=iscsi.example.com", "--iscsi-transport=userspace",
                            "--fuse-io-uring", "--replacement-timeout=60", "--takeover-after=off",
                            "--log-level=info,reconciler=debug", "--log-format=json",
                            "--metrics-address=0.0.0.0:29781", "--max-volumes-per-node=32"}));
  for (const YAML::Node& m : container["volumeMounts"]) {
    const std::string path = m["mountPath"].as<std::string>();
    EXPECT_THAT(path, Not(::testing::StartsWith("/var/lib/kubelet"))) << "not moved to kubeletDir";
  }
  for (const YAML::Node& v : pod["volumes"]) {
    if (v["name"].as<std::string>().starts_with("kubelet") ||
        v["name"].as<std::string>() == "registration-dir") {
      EXPECT_THAT(v["hostPath"]["path"].as<std::string>(),
                  ::testing::StartsWith("/var/snap/microk8s/common/var/lib/kubelet/"));
    }
  }
  EXPECT_EQ(container["ports"][0]["containerPort"].as<int>(), 29781);
  EXPECT_EQ(container["resources"]["limits"]["memory"].as<std::string>(), "512Mi");
  EXPECT_EQ(pod["nodeSelector"]["storage.example.com/iscsi"].as<std::string>(), "true");
  EXPECT_EQ(pod["tolerations"][0]["key"].as<std::string>(), "storage.example.com/dedicated");
  EXPECT_TRUE(pod["affinity"]["nodeAffinity"].IsMap());
  EXPECT_EQ(pod["priorityClassName"].as<std::string>(), "storage-critical");
  EXPECT_EQ(
      ds["spec"]["template"]["metadata"]["annotations"]["example.com/owner"].as<std::string>(),
      "storage-team");
  EXPECT_EQ(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as<int>(), 3);
}

// The PodMonitor scrapes the DaemonSet's pods at their metrics port, over HTTPS with the TLS
// settings given.
TEST(HelmChartTest, ThePodMonitorScrapesTheNodePodsMetricsPort) {
  const std::map<std::string, YAML::Node> chart =
      Render({"-f", SourcePath("tests/deploy/helm-values.yaml")});
  EXPECT_EQ(Render({}).count("PodMonitor/stagehand-node"), 0U) << "off by default";
  ASSERT_EQ(chart.count("PodMonitor/stagehand-node"), 1U);
  const YAML::Node monitor = chart.at("PodMonitor/stagehand-node");
  const YAML::Node pod = chart.at("DaemonSet/stagehand-node")["spec"]["template"];
  const YAML::Node endpoint = monitor["spec"]["podMetricsEndpoints"][0];

  EXPECT_EQ(monitor["apiVersion"].as<std::string>(), "monitoring.coreos.com/v1");
  EXPECT_EQ(monitor["metadata"]["namespace"].as<std::string>(), "stagehand-system");
  EXPECT_EQ(monitor["metadata"]["labels"]["release"].as<std::string>(), "kube-prometheus-stack");
  for (const auto& kv : monitor["spec"]["selector"]["matchLabels"]) {
    EXPECT_EQ(pod["metadata"]["labels"][kv.first.as<std::string>()].as<std::string>(""),
              kv.second.as<std::string>())
        << kv.first.as<std::string>();
  }
  EXPECT_EQ(monitor["spec"]["selector"]["matchLabels"].size(), 3U);
  EXPECT_EQ(endpoint["port"].as<std::string>(),
            pod["spec"]["containers"][0]["ports"][0]["name"].as<std::string>());
  EXPECT_EQ(endpoint["path"].as<std::string>(), "/metrics");
  EXPECT_EQ(endpoint["interval"].as<std::string>(), "15s");
  EXPECT_EQ(endpoint["scheme"].as<std::string>(), "https");
  EXPECT_EQ(endpoint["tlsConfig"]["serverName"].as<std::string>(), "stagehand-metrics");
  EXPECT_EQ(endpoint["tlsConfig"]["keySecret"]["name"].as<std::string>(), "prometheus-client");

  const std::map<std::string, YAML::Node> plain =
      Render({"--set", "metrics.podMonitor.enabled=true"});
  const YAML::Node plain_endpoint =
      plain.at("PodMonitor/stagehand-node")["spec"]["podMetricsEndpoints"][0];
  EXPECT_FALSE(plain_endpoint["scheme"]) << "HTTP without metrics.tls";
  EXPECT_FALSE(plain_endpoint["tlsConfig"]);
  EXPECT_FALSE(plain_endpoint["interval"]);
}

// A PodMonitor for metrics that are off is refused at render time.
TEST(HelmChartTest, APodMonitorWithoutMetricsIsRefused) {
  auto r =
      RunProcess({HelmBinary(), "template", "stagehand", SourcePath("deploy/helm/stagehand"),
                  "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.enabled=false"},
                 RunOptions{std::chrono::seconds(60)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->output, ::testing::HasSubstr("needs metrics.enabled"));
}

TEST(HelmChartTest, MetricsTurnedOffTakeTheProbesAndThePortWithThem) {
  const std::map<std::string, YAML::Node> chart =
      Render({"--set", "metrics.enabled=false", "--set", "metrics.tls.secretName=tls"});
  const YAML::Node container =
      chart.at("DaemonSet/stagehand-node")["spec"]["template"]["spec"]["containers"][0];
  std::vector<std::string> args;
  for (const YAML::Node& a : container["args"]) {
    args.push_back(a.as<std::string>());
  }
  EXPECT_THAT(args, Contains("--metrics-address="));
  EXPECT_FALSE(container["livenessProbe"]);
  EXPECT_FALSE(container["readinessProbe"]);
  EXPECT_FALSE(container["ports"]);
  for (const YAML::Node& v :
       chart.at("DaemonSet/stagehand-node")["spec"]["template"]["spec"]["volumes"]) {
    EXPECT_FALSE(v["secret"]) << "a Secret mounted for metrics that are off";
  }
}

// A client CA without a server certificate is refused at render time, not by a crashing pod.
TEST(HelmChartTest, AClientCaWithoutTlsIsRefused) {
  auto r = RunProcess({HelmBinary(), "template", "stagehand", SourcePath("deploy/helm/stagehand"),
                       "--set", "metrics.tls.clientCASecretName=ca"},
                      RunOptions{std::chrono::seconds(60)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->output, ::testing::HasSubstr("needs metrics.tls.secretName"));
}

// Another release name gives other object names (two releases may share a cluster).
TEST(HelmChartTest, AnotherReleaseNamesItsObjectsAfterItself) {
  const std::map<std::string, YAML::Node> chart = Objects(
      YAML::LoadAll(Helm({"template", "edge", SourcePath("deploy/helm/stagehand"), "--namespace",
                          "storage", "--set", "driverName=edge.example.com"})));
  ASSERT_EQ(chart.count("DaemonSet/edge-stagehand-node"), 1U);
  EXPECT_EQ(chart.at("DaemonSet/edge-stagehand-node")["metadata"]["namespace"].as<std::string>(),
            "storage");
  EXPECT_EQ(chart.count("ServiceAccount/edge-stagehand-node"), 1U);
  EXPECT_EQ(chart
                .at("DaemonSet/edge-stagehand-node")["spec"]["selector"]["matchLabels"]
                                                    ["app.kubernetes.io/instance"]
                .as<std::string>(),
            "edge");
}

}  // namespace
}  // namespace stagehand
