// Checks the shipped deployment files: the Kubernetes manifests in deploy/kubernetes/, the
// systemd unit and the packaged default config. Pure file checks, no cluster and no systemd.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#ifndef SH_SOURCE_DIR
#error "SH_SOURCE_DIR must be defined (the project source directory)"
#endif

namespace stagehand::deploy {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;
using ::testing::Not;

constexpr char kDriverName[] = "iscsi.stagehand.dev";
constexpr int kMetricsPort = 29780;

std::string SourcePath(const std::string& relative) {
  return std::string(SH_SOURCE_DIR) + "/" + relative;
}

std::vector<YAML::Node> LoadAll(const std::string& relative) {
  return YAML::LoadAllFromFile(SourcePath(relative));
}

// The one document of `kind` (and `name`, when given) in `docs`; a null node if there is none.
YAML::Node FindObject(const std::vector<YAML::Node>& docs, const std::string& kind,
                      const std::string& name = "") {
  for (const YAML::Node& doc : docs) {
    if (doc["kind"].as<std::string>("") == kind &&
        (name.empty() || doc["metadata"]["name"].as<std::string>("") == name)) {
      return doc;
    }
  }
  return YAML::Node(YAML::NodeType::Null);
}

std::vector<std::string> Strings(const YAML::Node& seq) {
  std::vector<std::string> out;
  for (const YAML::Node& item : seq) {
    out.push_back(item.as<std::string>());
  }
  return out;
}

// The item of `seq` whose `key` equals `value`; a null node if there is none.
YAML::Node FindBy(const YAML::Node& seq, const std::string& key, const std::string& value) {
  for (const YAML::Node& item : seq) {
    if (item[key].as<std::string>("") == value) {
      return item;
    }
  }
  return YAML::Node(YAML::NodeType::Null);
}

// Resolves a probe port that may be a number or the name of one of `container`'s ports.
int ProbePort(const YAML::Node& container, const YAML::Node& port) {
  int number = 0;
  if (YAML::convert<int>::decode(port, number)) {
    return number;
  }
  return FindBy(container["ports"], "name", port.as<std::string>())["containerPort"].as<int>(-1);
}

TEST(DeployTest, EveryKubernetesDocumentParsesAndHasKindAndName) {
  for (const char* file :
       {"deploy/kubernetes/csidriver.yaml", "deploy/kubernetes/daemonset.yaml",
        "deploy/kubernetes/example-pv.yaml", "deploy/kubernetes/kustomization.yaml"}) {
    SCOPED_TRACE(file);

    std::vector<YAML::Node> docs;
    ASSERT_NO_THROW(docs = LoadAll(file));

    ASSERT_THAT(docs, Not(IsEmpty()));
    for (const YAML::Node& doc : docs) {
      ASSERT_TRUE(doc.IsMap());
      EXPECT_TRUE(doc["apiVersion"].IsScalar());
      EXPECT_TRUE(doc["kind"].IsScalar());
    }
  }
}

TEST(DeployTest, KustomizationListsExistingFiles) {
  const YAML::Node k = LoadAll("deploy/kubernetes/kustomization.yaml").at(0);

  const std::vector<std::string> resources = Strings(k["resources"]);

  EXPECT_THAT(resources, IsSupersetOf({"csidriver.yaml", "daemonset.yaml"}));
  for (const std::string& r : resources) {
    EXPECT_TRUE(std::ifstream(SourcePath("deploy/kubernetes/" + r)).good()) << r;
  }
}

TEST(DeployTest, CsiDriverNeedsNoAttachAndIsPersistent) {
  const YAML::Node driver = FindObject(LoadAll("deploy/kubernetes/csidriver.yaml"), "CSIDriver");
  ASSERT_TRUE(driver.IsMap());

  const YAML::Node spec = driver["spec"];

  EXPECT_EQ(driver["apiVersion"].as<std::string>(), "storage.k8s.io/v1");
  EXPECT_EQ(driver["metadata"]["name"].as<std::string>(), kDriverName);
  EXPECT_FALSE(spec["attachRequired"].as<bool>());
  EXPECT_FALSE(spec["podInfoOnMount"].as<bool>());
  EXPECT_THAT(Strings(spec["volumeLifecycleModes"]), Contains("Persistent"));
  EXPECT_EQ(spec["fsGroupPolicy"].as<std::string>(), "File");
  // The kubelet passes the pod's SELinux context as a mount option, and asks NodeGetInfo again
  // (the API server refuses a period under 10 s).
  EXPECT_TRUE(spec["seLinuxMount"].as<bool>());
  EXPECT_GE(spec["nodeAllocatableUpdatePeriodSeconds"].as<int>(), 10);
}

class DaemonSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    docs_ = LoadAll("deploy/kubernetes/daemonset.yaml");
    ds_ = FindObject(docs_, "DaemonSet", "stagehand-node");
    ASSERT_TRUE(ds_.IsMap());
    pod_ = ds_["spec"]["template"]["spec"];
    container_ = FindBy(pod_["containers"], "name", "stagehand");
    ASSERT_TRUE(container_.IsMap());
  }

  // The volumeMount at `path` and the hostPath of the volume it mounts (null nodes if absent).
  std::pair<YAML::Node, YAML::Node> MountAt(const std::string& path) const {
    YAML::Node mount = FindBy(container_["volumeMounts"], "mountPath", path);
    if (!mount.IsMap()) {
      return {mount, YAML::Node(YAML::NodeType::Null)};
    }
    YAML::Node volume = FindBy(pod_["volumes"], "name", mount["name"].as<std::string>());
    return {mount, volume["hostPath"]};
  }

  std::vector<YAML::Node> docs_;
  YAML::Node ds_;
  YAML::Node pod_;
  YAML::Node container_;
};

TEST_F(DaemonSetTest, NamespaceAndServiceAccountExist) {
  const std::string ns = ds_["metadata"]["namespace"].as<std::string>();

  EXPECT_EQ(ns, "stagehand-system");
  EXPECT_TRUE(FindObject(docs_, "Namespace", ns).IsMap());
  const YAML::Node sa =
      FindObject(docs_, "ServiceAccount", pod_["serviceAccountName"].as<std::string>());
  ASSERT_TRUE(sa.IsMap());
  EXPECT_EQ(sa["metadata"]["namespace"].as<std::string>(), ns);
}

TEST_F(DaemonSetTest, SelectorMatchesTemplateLabels) {
  const YAML::Node selector = ds_["spec"]["selector"]["matchLabels"];
  const YAML::Node labels = ds_["spec"]["template"]["metadata"]["labels"];

  ASSERT_TRUE(selector.IsMap());
  for (const auto& kv : selector) {
    EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>());
  }
}

TEST_F(DaemonSetTest, PodRunsPrivilegedOnTheHostNetworkOnEveryNode) {
  EXPECT_TRUE(container_["securityContext"]["privileged"].as<bool>());
  EXPECT_TRUE(pod_["hostNetwork"].as<bool>());
  // Session processes run on the host; the agent checks and stops them by PID.
  EXPECT_TRUE(pod_["hostPID"].as<bool>(false));
  EXPECT_EQ(pod_["priorityClassName"].as<std::string>(), "system-node-critical");
  EXPECT_TRUE(FindBy(pod_["tolerations"], "operator", "Exists").IsMap());
  EXPECT_EQ(ds_["spec"]["updateStrategy"]["type"].as<std::string>(), "RollingUpdate");
  EXPECT_EQ(ds_["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as<int>(), 1);
  EXPECT_TRUE(container_["resources"]["requests"].IsMap());
}

TEST_F(DaemonSetTest, ArgsSelectKubernetesModeAndNodeName) {
  const std::vector<std::string> args = Strings(container_["args"]);

  EXPECT_THAT(args,
              IsSupersetOf({"--mode=kubernetes", "--node-id=$(NODE_NAME)",
                            "--metrics-address=$(HOST_IP):29780", "--state-dir=/var/lib/stagehand",
                            "--session-launcher=systemd", "--kubelet-dir=/var/lib/kubelet"}));
  const YAML::Node env = FindBy(container_["env"], "name", "NODE_NAME");
  ASSERT_TRUE(env.IsMap());
  EXPECT_EQ(env["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(), "spec.nodeName");
  // Metrics on the node's own address, not on every address of the node.
  const YAML::Node host_ip = FindBy(container_["env"], "name", "HOST_IP");
  ASSERT_TRUE(host_ip.IsMap());
  EXPECT_EQ(host_ip["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(), "status.hostIP");
}

TEST_F(DaemonSetTest, MountsKubeletPluginsAndPodsBidirectionallyAsSiblings) {
  for (const char* path : {"/var/lib/kubelet/plugins", "/var/lib/kubelet/pods"}) {
    SCOPED_TRACE(path);
    const auto [mount, host] = MountAt(path);
    ASSERT_TRUE(mount.IsMap());
    EXPECT_EQ(mount["mountPropagation"].as<std::string>(""), "Bidirectional");
    EXPECT_EQ(host["path"].as<std::string>(""), path);
  }
  // Not the kubelet's root itself: plugins_registry would then be nested under it.
  EXPECT_FALSE(MountAt("/var/lib/kubelet").first.IsMap());
}

// A mount under a Bidirectional one is copied back to the host through the shared mount on every
// container start: the host's mount count doubles with each restart.
TEST_F(DaemonSetTest, NoMountIsNestedUnderABidirectionalMount) {
  std::vector<std::string> bidirectional;
  for (const YAML::Node& m : container_["volumeMounts"]) {
    if (m["mountPropagation"].as<std::string>("") == "Bidirectional") {
      bidirectional.push_back(m["mountPath"].as<std::string>());
    }
  }
  ASSERT_THAT(bidirectional, Not(IsEmpty()));
  for (const YAML::Node& m : container_["volumeMounts"]) {
    const std::string path = m["mountPath"].as<std::string>();
    for (const std::string& outer : bidirectional) {
      EXPECT_FALSE(path != outer && path.rfind(outer + "/", 0) == 0)
          << path << " is nested under the Bidirectional mount " << outer;
    }
  }
}

// The kubelet passes host paths (staging and target paths, the registration socket's endpoint),
// so every kubelet path is mounted at the same path it has on the host, under --kubelet-dir.
TEST_F(DaemonSetTest, KubeletPathsAreMountedWhereTheyAreOnTheHostUnderKubeletDir) {
  const std::vector<std::string> args = Strings(container_["args"]);
  const auto arg = std::find_if(args.begin(), args.end(), [](const std::string& a) {
    return absl::StartsWith(a, "--kubelet-dir=");
  });
  ASSERT_NE(arg, args.end());
  const std::string kubelet_dir = arg->substr(std::string("--kubelet-dir=").size());
  int under = 0;
  for (const YAML::Node& m : container_["volumeMounts"]) {
    const std::string path = m["mountPath"].as<std::string>();
    const YAML::Node volume = FindBy(pod_["volumes"], "name", m["name"].as<std::string>());
    EXPECT_EQ(volume["hostPath"]["path"].as<std::string>(""), path);
    if (absl::StartsWith(path, kubelet_dir + "/")) {
      ++under;
    }
  }
  EXPECT_EQ(under, 3);  // plugins, pods, plugins_registry.
}

TEST_F(DaemonSetTest, MountsHostPathsTheAgentNeeds) {
  struct Want {
    std::string path;
    std::string type;  // empty: any
  };

  const std::vector<Want> wants = {
      {"/var/lib/kubelet/plugins_registry", ""},
      {"/dev", ""},
      {"/sys", ""},
      {"/run/stagehand", "DirectoryOrCreate"},
      {"/var/lib/stagehand", "DirectoryOrCreate"},
      // The bus's directory, not its socket file: that would name a dead socket once the
      // host's bus restarts.
      {"/run/dbus", "Directory"},
      {"/etc/iscsi", "DirectoryOrCreate"},      // Kernel transport: node records,
      {"/etc/multipath", "DirectoryOrCreate"},  // the WWIDs multipathd builds maps for,
      {"/run/udev", ""},                        // and udev's device database.
  };

  for (const Want& want : wants) {
    SCOPED_TRACE(want.path);
    const auto [mount, host] = MountAt(want.path);
    ASSERT_TRUE(mount.IsMap());
    ASSERT_TRUE(host.IsMap());
    EXPECT_EQ(host["path"].as<std::string>(), want.path);
    if (!want.type.empty()) {
      EXPECT_EQ(host["type"].as<std::string>(""), want.type);
    }
  }
}

TEST_F(DaemonSetTest, ProbesHitHealthAndReadinessOnTheMetricsPort) {
  const YAML::Node liveness = container_["livenessProbe"]["httpGet"];
  const YAML::Node readiness = container_["readinessProbe"]["httpGet"];

  ASSERT_TRUE(liveness.IsMap());
  ASSERT_TRUE(readiness.IsMap());
  EXPECT_EQ(liveness["path"].as<std::string>(), "/healthz");
  EXPECT_EQ(ProbePort(container_, liveness["port"]), kMetricsPort);
  EXPECT_EQ(readiness["path"].as<std::string>(), "/readyz");
  EXPECT_EQ(ProbePort(container_, readiness["port"]), kMetricsPort);
}

TEST(DeployTest, ExamplePersistentVolumeUsesTheSecretForStaging) {
  const std::vector<YAML::Node> docs = LoadAll("deploy/kubernetes/example-pv.yaml");
  const YAML::Node pv = FindObject(docs, "PersistentVolume");
  ASSERT_TRUE(pv.IsMap());
  const YAML::Node csi = pv["spec"]["csi"];

  const YAML::Node ref = csi["nodeStageSecretRef"];

  EXPECT_EQ(csi["driver"].as<std::string>(), kDriverName);
  EXPECT_FALSE(csi["volumeHandle"].as<std::string>("").empty());
  EXPECT_EQ(csi["fsType"].as<std::string>(), "ext4");
  for (const char* key : {"targetPortal", "iqn", "lun"}) {
    EXPECT_TRUE(csi["volumeAttributes"][key].IsScalar()) << key;
  }
  EXPECT_EQ(pv["spec"]["persistentVolumeReclaimPolicy"].as<std::string>(), "Retain");
  EXPECT_EQ(pv["spec"]["storageClassName"].as<std::string>("x"), "");
  EXPECT_THAT(Strings(pv["spec"]["accessModes"]), Contains("ReadWriteOnce"));
  ASSERT_TRUE(ref.IsMap());
  const YAML::Node secret = FindObject(docs, "Secret", ref["name"].as<std::string>());
  ASSERT_TRUE(secret.IsMap());
  EXPECT_EQ(secret["metadata"]["namespace"].as<std::string>(), ref["namespace"].as<std::string>());
  EXPECT_EQ(secret["type"].as<std::string>(), "Opaque");
  EXPECT_TRUE(secret["stringData"]["node.session.auth.username"].IsScalar());
  EXPECT_TRUE(secret["stringData"]["node.session.auth.password"].IsScalar());
}

TEST(DeployTest, ExampleClaimAndPodUseTheVolume) {
  const std::vector<YAML::Node> docs = LoadAll("deploy/kubernetes/example-pv.yaml");
  const YAML::Node pv = FindObject(docs, "PersistentVolume");
  const YAML::Node pvc = FindObject(docs, "PersistentVolumeClaim");
  const YAML::Node pod = FindObject(docs, "Pod");
  ASSERT_TRUE(pv.IsMap());
  ASSERT_TRUE(pvc.IsMap());
  ASSERT_TRUE(pod.IsMap());

  const YAML::Node claim = pod["spec"]["volumes"][0]["persistentVolumeClaim"];

  EXPECT_EQ(pvc["spec"]["volumeName"].as<std::string>(), pv["metadata"]["name"].as<std::string>());
  EXPECT_EQ(pvc["spec"]["storageClassName"].as<std::string>("x"), "");
  EXPECT_EQ(claim["claimName"].as<std::string>(""), pvc["metadata"]["name"].as<std::string>());
}

// The unit file as (key, value) lines, comments and section headers dropped.
std::vector<std::pair<std::string, std::string>> UnitSettings() {
  std::ifstream in(SourcePath("systemd/stagehand.service"));
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') {
      continue;
    }
    const size_t eq = line.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    }
  }
  return out;
}

std::string UnitValue(const std::vector<std::pair<std::string, std::string>>& settings,
                      const std::string& key) {
  for (const auto& [k, v] : settings) {
    if (k == key) {
      return v;
    }
  }
  return "<unset>";
}

// deploy/monitoring: one set of alert rules in two shapes (a plain rules file and the Prometheus
// Operator's PrometheusRule), each alert with what an operator needs to act.
TEST(MonitoringTest, ThePrometheusRuleCarriesTheRulesFileGroups) {
  const YAML::Node rules = YAML::LoadFile(SourcePath("deploy/monitoring/stagehand.rules.yaml"));
  const YAML::Node rule = YAML::LoadFile(SourcePath("deploy/monitoring/prometheusrule.yaml"));
  const YAML::Node namespace_doc =
      FindObject(LoadAll("deploy/kubernetes/daemonset.yaml"), "Namespace");

  EXPECT_EQ(rule["apiVersion"].as<std::string>(""), "monitoring.coreos.com/v1");
  EXPECT_EQ(rule["kind"].as<std::string>(""), "PrometheusRule");
  EXPECT_EQ(rule["metadata"]["namespace"].as<std::string>(""),
            namespace_doc["metadata"]["name"].as<std::string>("?"));
  EXPECT_EQ(YAML::Dump(rule["spec"]["groups"]), YAML::Dump(rules["groups"]))
      << "change deploy/monitoring/prometheusrule.yaml with stagehand.rules.yaml";
}

// The PodMonitor selects the DaemonSet's pods and scrapes their metrics port.
TEST(MonitoringTest, ThePodMonitorScrapesTheDaemonSetsMetricsPort) {
  const YAML::Node monitor = YAML::LoadFile(SourcePath("deploy/monitoring/podmonitor.yaml"));
  const YAML::Node ds = FindObject(LoadAll("deploy/kubernetes/daemonset.yaml"), "DaemonSet");
  const YAML::Node pod = ds["spec"]["template"];

  EXPECT_EQ(monitor["kind"].as<std::string>(""), "PodMonitor");
  EXPECT_EQ(monitor["metadata"]["namespace"].as<std::string>(""),
            ds["metadata"]["namespace"].as<std::string>("?"));
  ASSERT_TRUE(monitor["spec"]["selector"]["matchLabels"].IsMap());
  for (const auto& kv : monitor["spec"]["selector"]["matchLabels"]) {
    EXPECT_EQ(pod["metadata"]["labels"][kv.first.as<std::string>()].as<std::string>(""),
              kv.second.as<std::string>())
        << kv.first.as<std::string>();
  }
  const YAML::Node endpoint = monitor["spec"]["podMetricsEndpoints"][0];
  const YAML::Node port =
      FindBy(pod["spec"]["containers"][0]["ports"], "name", endpoint["port"].as<std::string>(""));
  EXPECT_EQ(port["containerPort"].as<int>(0), kMetricsPort);
  EXPECT_EQ(endpoint["path"].as<std::string>(""), "/metrics");
}

TEST(MonitoringTest, EveryAlertHasASeverityASummaryAndADescription) {
  const YAML::Node rules = YAML::LoadFile(SourcePath("deploy/monitoring/stagehand.rules.yaml"));
  int alerts = 0;
  for (const YAML::Node& group : rules["groups"]) {
    for (const YAML::Node& r : group["rules"]) {
      const std::string name = r["alert"].as<std::string>("");
      ++alerts;
      EXPECT_THAT((std::vector<std::string>{"critical", "warning", "info"}),
                  Contains(r["labels"]["severity"].as<std::string>("")))
          << name;
      EXPECT_FALSE(r["annotations"]["summary"].as<std::string>("").empty()) << name;
      EXPECT_FALSE(r["annotations"]["description"].as<std::string>("").empty()) << name;
    }
  }
  EXPECT_GE(alerts, 6);
}

// Importable as it is: a uid, and every query through the dashboard's datasource variable (no
// datasource uid of someone's Grafana).
TEST(MonitoringTest, TheDashboardUsesItsOwnDatasourceVariable) {
  const YAML::Node dashboard =
      YAML::LoadFile(SourcePath("deploy/monitoring/stagehand-dashboard.json"));
  EXPECT_FALSE(dashboard["uid"].as<std::string>("").empty());
  EXPECT_EQ(
      FindBy(dashboard["templating"]["list"], "name", "datasource")["type"].as<std::string>(""),
      "datasource");
  int queries = 0;
  for (const YAML::Node& panel : dashboard["panels"]) {
    for (const YAML::Node& target : panel["targets"]) {
      ++queries;
      EXPECT_EQ(target["datasource"]["uid"].as<std::string>(""), "${datasource}")
          << panel["title"].as<std::string>("");
    }
  }
  EXPECT_GE(queries, 20);
}

TEST(UnitFileTest, NotifiesWatchdogAndKeepsSessionsOnStop) {
  const auto settings = UnitSettings();

  ASSERT_THAT(settings, Not(IsEmpty()));
  EXPECT_EQ(UnitValue(settings, "Type"), "notify");
  EXPECT_EQ(UnitValue(settings, "NotifyAccess"), "main");
  EXPECT_EQ(UnitValue(settings, "KillMode"), "process");
  EXPECT_NE(UnitValue(settings, "WatchdogSec"), "<unset>");
  EXPECT_EQ(UnitValue(settings, "Restart"), "on-failure");
  EXPECT_EQ(UnitValue(settings, "RuntimeDirectory"), "stagehand");
  EXPECT_EQ(UnitValue(settings, "RuntimeDirectoryPreserve"), "yes");
  EXPECT_EQ(UnitValue(settings, "StateDirectory"), "stagehand");
  EXPECT_EQ(UnitValue(settings, "ExecStart"),
            "/usr/bin/stagehand --config /etc/stagehand/config.yaml");
}

TEST(UnitFileTest, CreatesNoMountNamespace) {
  // Each of these gives the service its own mount namespace (systemd.exec(5)), and the mounts
  // stagehand makes would then never reach the host. PrivateNetwork= and NetworkNamespacePath=
  // do not, but they would hide the iSCSI portals.
  const std::vector<std::string> forbidden = {
      "PrivateMounts",
      "PrivateTmp",
      "PrivateDevices",
      "ProtectSystem",
      "ProtectHome",
      "ProtectKernelTunables",
      "ProtectKernelModules",
      "ProtectKernelLogs",
      "ProtectControlGroups",
      "ProtectProc",
      "ProcSubset",
      "ReadOnlyPaths",
      "ReadWritePaths",
      "InaccessiblePaths",
      "ExecPaths",
      "NoExecPaths",
      "TemporaryFileSystem",
      "BindPaths",
      "BindReadOnlyPaths",
      "MountFlags",
      "MountImages",
      "ExtensionImages",
      "ExtensionDirectories",
      "RootDirectory",
      "RootImage",
      "DynamicUser",
      "LogNamespace",
      "PrivateUsers",
      "PrivateNetwork",
      "NetworkNamespacePath",
  };

  const auto settings = UnitSettings();

  for (const auto& [key, value] : settings) {
    EXPECT_EQ(std::count(forbidden.begin(), forbidden.end(), key), 0)
        << key << "=" << value << " creates a mount namespace or hides the network";
  }
}

TEST(PackagingTest, DefaultConfigIsAFlatMapWithTheDocumentedDefaults) {
  YAML::Node config;
  ASSERT_NO_THROW(config = YAML::LoadFile(SourcePath("packaging/config.yaml")));

  ASSERT_TRUE(config.IsMap());
  for (const auto& kv : config) {
    EXPECT_TRUE(kv.second.IsScalar()) << kv.first.as<std::string>();
  }
  EXPECT_EQ(config["mode"].as<std::string>(), "standalone");
  EXPECT_EQ(config["state-dir"].as<std::string>(), "/var/lib/stagehand");
  EXPECT_EQ(config["runtime-dir"].as<std::string>(), "/run/stagehand");
  EXPECT_EQ(config["metrics-address"].as<std::string>(), "127.0.0.1:29780");
  EXPECT_EQ(config["log-format"].as<std::string>(), "auto");
  EXPECT_EQ(config["stats-period"].as<int>(), 60);
}

TEST(PackagingTest, ExampleVolumeManifestHasTheReadmeSchema) {
  YAML::Node m;
  ASSERT_NO_THROW(m = YAML::LoadFile(SourcePath("packaging/example-volume.yaml")));

  ASSERT_TRUE(m.IsMap());
  for (const auto& kv : m) {
    EXPECT_THAT(
        (std::vector<std::string>{"name", "driver", "volumeHandle", "capability", "volumeContext",
                                  "publishContext", "secretsFile", "publish"}),
        Contains(kv.first.as<std::string>()));
  }
  EXPECT_EQ(m["driver"].as<std::string>(), kDriverName);
  EXPECT_TRUE(m["volumeContext"]["targetPortal"].IsScalar());
  EXPECT_TRUE(m["volumeContext"]["iqn"].IsScalar());
  EXPECT_TRUE(m["publish"].IsSequence());
}

}  // namespace
}  // namespace stagehand::deploy
