// Reconciler benchmark: the real `stagehand` agent (standalone) with N declared volumes served by
// a fast in-memory CSI driver of this process, registered through a real registration socket and
// serving CSI over a real unix socket. The driver really bind-mounts (staging and targets), so
// that reconstruction after a restart sees what a real driver leaves.
//
// Prints: time from N declared volumes to all published, and as a baseline the time the same
// 2N CSI calls take when made one after another by a plain client (ratio = agent / baseline);
// CPU used while idle; RSS; time from restart to ready and all published, and the Node* calls the
// restart made (should be 0).
//
//   reconciler_bench [--volumes 1000] [--idle-seconds 60]

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/subprocess.h"
#include "bench/proc_stats.h"
#include "proto/agent.grpc.pb.h"
#include "proto/csi.grpc.pb.h"
#include "registration/registrar.h"
#include <CLI/CLI.hpp>

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A CSI node plugin that only bind-mounts: stage = bind an empty dir on the staging path,
// publish = bind the staging path on the target.
class MemoryDriver final : public csi::v1::Identity::Service, public csi::v1::Node::Service {
 public:
  explicit MemoryDriver(std::string source) : source_(std::move(source)) {}

  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* r) override {
    r->set_name("mem.bench.dev");
    r->set_vendor_version("1");
    return grpc::Status::OK;
  }

  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                     csi::v1::ProbeResponse* r) override {
    r->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }

  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const csi::v1::NodeGetCapabilitiesRequest*,
                                   csi::v1::NodeGetCapabilitiesResponse* r) override {
    r->add_capabilities()->mutable_rpc()->set_type(
        csi::v1::NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME);
    return grpc::Status::OK;
  }

  grpc::Status NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                           csi::v1::NodeGetInfoResponse* r) override {
    r->set_node_id("bench");
    return grpc::Status::OK;
  }

  grpc::Status NodeStageVolume(grpc::ServerContext*, const csi::v1::NodeStageVolumeRequest* r,
                               csi::v1::NodeStageVolumeResponse*) override {
    ++calls;
    return Bind(source_, r->staging_target_path());
  }

  grpc::Status NodeUnstageVolume(grpc::ServerContext*, const csi::v1::NodeUnstageVolumeRequest* r,
                                 csi::v1::NodeUnstageVolumeResponse*) override {
    ++calls;
    return Unbind(r->staging_target_path());
  }

  grpc::Status NodePublishVolume(grpc::ServerContext*, const csi::v1::NodePublishVolumeRequest* r,
                                 csi::v1::NodePublishVolumeResponse*) override {
    ++calls;
    return Bind(r->staging_target_path(), r->target_path());
  }

  grpc::Status NodeUnpublishVolume(grpc::ServerContext*,
                                   const csi::v1::NodeUnpublishVolumeRequest* r,
                                   csi::v1::NodeUnpublishVolumeResponse*) override {
    ++calls;
    return Unbind(r->target_path());
  }

  std::atomic<uint64_t> calls{0};

 private:
  static bool Mounted(const std::string& path) {
    struct stat st {
    }, parent{};

    return stat(path.c_str(), &st) == 0 && stat(stagehand::ParentDir(path).c_str(), &parent) == 0 &&
           st.st_dev != parent.st_dev;
  }

  grpc::Status Bind(const std::string& from, const std::string& to) {
    (void)stagehand::MakeDirs(to, 0750);
    if (Mounted(to)) {
      return grpc::Status::OK;
    }
    if (mount(from.c_str(), to.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return grpc::Status(grpc::StatusCode::INTERNAL, std::strerror(errno));
    }
    return grpc::Status::OK;
  }

  static grpc::Status Unbind(const std::string& path) {
    if (Mounted(path)) {
      umount2(path.c_str(), 0);
    }
    rmdir(path.c_str());
    return grpc::Status::OK;
  }

  std::string source_;
};

pid_t StartAgent(const std::string& root) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string log = root + "/agent.log";
    freopen(log.c_str(), "a", stderr);
    execl(STAGEHAND_BINARY, STAGEHAND_BINARY, ("--state-dir=" + root + "/state").c_str(),
          ("--runtime-dir=" + root + "/run").c_str(), ("--manifest-dir=" + root + "/m").c_str(),
          "--log-level=warn", "--max-parallel-operations=16", "--metrics-address=127.0.0.1:0",
          nullptr);
    _exit(127);
  }
  return pid;
}

void Stop(pid_t pid, int sig) {
  kill(pid, sig);
  waitpid(pid, nullptr, 0);
}

// Long-polls the agent until it is ready and `published` volumes are published.
bool WaitPublished(stagehand::agent::v1::Agent::Stub& agent, int published, bool empty = false) {
  uint64_t generation = 0;
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (Clock::now() < deadline) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stagehand::agent::v1::ListVolumesRequest request;
    request.set_after_generation(generation);
    request.set_wait_ms(generation == 0 ? 0 : 10000);
    stagehand::agent::v1::ListVolumesResponse response;
    if (!agent.ListVolumes(&context, request, &response).ok()) {
      continue;
    }
    int n = 0;
    for (const auto& v : response.volumes()) {
      n += v.phase() == "published" ? 1 : 0;
    }
    if (response.ready() && n == published && (!empty || response.volumes_size() == 0)) {
      return true;
    }
    generation = response.generation();
  }
  return false;
}

std::unique_ptr<stagehand::agent::v1::Agent::Stub> AgentStub(const std::string& root) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Reconnect quickly while the agent starts (gRPC's first backoff is 1 s by default).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  return stagehand::agent::v1::Agent::NewStub(grpc::CreateCustomChannel(
      "unix:" + root + "/run/agent.sock", grpc::InsecureChannelCredentials(), args));
}

// The same 2N calls as the agent makes, one after another, from a plain client; the stages and
// publishes are undone afterwards. Returns the seconds they took.
double MeasureBaseline(const std::string& root, int volumes) {
  auto node = csi::v1::Node::NewStub(
      grpc::CreateChannel("unix:" + root + "/drv/csi.sock", grpc::InsecureChannelCredentials()));
  const auto start = Clock::now();
  for (int i = 0; i < volumes; ++i) {
    const std::string base = root + "/base/" + std::to_string(i);
    csi::v1::NodeStageVolumeRequest stage;
    stage.set_volume_id(std::to_string(i));
    stage.set_staging_target_path(base + "/g");
    csi::v1::NodeStageVolumeResponse staged;
    grpc::ClientContext c1;
    (void)node->NodeStageVolume(&c1, stage, &staged);
    csi::v1::NodePublishVolumeRequest publish;
    publish.set_volume_id(std::to_string(i));
    publish.set_staging_target_path(base + "/g");
    publish.set_target_path(base + "/t");
    csi::v1::NodePublishVolumeResponse published;
    grpc::ClientContext c2;
    (void)node->NodePublishVolume(&c2, publish, &published);
  }
  const double baseline = Seconds(Clock::now() - start);
  for (int i = 0; i < volumes; ++i) {
    const std::string base = root + "/base/" + std::to_string(i);
    umount2((base + "/t").c_str(), 0);
    umount2((base + "/g").c_str(), 0);
  }
  return baseline;
}

// Declares `volumes` volumes and prints how long the agent took to publish them all.
void MeasureConverge(const std::string& root, stagehand::agent::v1::Agent::Stub& agent, int volumes,
                     double baseline) {
  const auto declared = Clock::now();
  for (int i = 0; i < volumes; ++i) {
    const std::string name = "v" + std::to_string(i);
    const std::string yaml = "name: " + name + "\ndriver: mem.bench.dev\nvolumeHandle: " + name +
                             "\ncapability:\n  mount: {}\npublish:\n  - targetPath: " + root +
                             "/t/" + name + "\n";
    (void)stagehand::WriteFileAtomically(root + "/m/" + name + ".yaml", yaml, 0644);
  }
  const bool converged = WaitPublished(agent, volumes);
  const double converge = Seconds(Clock::now() - declared);
  std::printf(
      "converge: %d declared volumes -> all published: %.2f s (%s), ratio to baseline "
      "%.2f (aim: under 2 s)\n",
      volumes, converge, converged ? "ok" : "NOT CONVERGED", converge / baseline);
}

// Prints the agent's CPU over `idle_seconds` of doing nothing, its memory and threads.
void MeasureIdle(pid_t agent, int volumes, int idle_seconds) {
  const long hz = sysconf(_SC_CLK_TCK);
  const uint64_t before = stagehand::bench::CpuTicks(agent);
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));  // Measuring idleness.
  const double cpu =
      static_cast<double>(stagehand::bench::CpuTicks(agent) - before) / static_cast<double>(hz);
  std::printf("idle: %.3f s CPU in %d s = %.3f %% (aim: under 0.5 %%)\n", cpu, idle_seconds,
              100.0 * cpu / idle_seconds);
  std::printf(
      "rss: %.1f MB (%.1f MB anonymous) and %ld threads with %d volumes (aims: under 25 "
      "MB, at most 8 threads)\n",
      stagehand::bench::StatusField(agent, "VmRSS") / 1024.0,
      stagehand::bench::StatusField(agent, "RssAnon") / 1024.0,
      stagehand::bench::StatusField(agent, "Threads"), volumes);
}

// Removes every manifest and prints what the agent has left once it has torn them down.
void TearDownThroughTheAgent(const std::string& root, stagehand::agent::v1::Agent::Stub& agent,
                             int volumes) {
  for (int i = 0; i < volumes; ++i) {
    unlink((root + "/m/v" + std::to_string(i) + ".yaml").c_str());
  }
  (void)WaitPublished(agent, 0, /*empty=*/true);
  grpc::ClientContext context;
  stagehand::agent::v1::ListVolumesRequest request;
  stagehand::agent::v1::ListVolumesResponse response;
  (void)agent.ListVolumes(&context, request, &response);
  std::printf("teardown: %d volumes left\n", response.volumes_size());
}

// The benchmark against a running in-memory driver; 1 when the agent did not start.
int RunBenchmark(const std::string& root, MemoryDriver& driver, int volumes, int idle_seconds) {
  const double baseline = MeasureBaseline(root, volumes);
  std::printf("baseline: %d stage+publish calls in sequence: %.2f s\n", volumes, baseline);
  driver.calls = 0;

  pid_t agent = StartAgent(root);
  auto stub = AgentStub(root);
  if (!WaitPublished(*stub, 0)) {
    std::cerr << "agent did not become ready; see " << root << "/agent.log\n";
    Stop(agent, SIGKILL);
    return 1;
  }
  MeasureConverge(root, *stub, volumes, baseline);
  MeasureIdle(agent, volumes, idle_seconds);

  Stop(agent, SIGTERM);
  const uint64_t calls_before = driver.calls.load();
  const auto restart = Clock::now();
  agent = StartAgent(root);
  stub = AgentStub(root);
  const bool ready = WaitPublished(*stub, volumes);
  std::printf(
      "restart: ready with %d published volumes in %.2f s (%s), Node* calls made: %llu "
      "(aims: under 1 s, 0 calls)\n",
      volumes, Seconds(Clock::now() - restart), ready ? "ok" : "NOT READY",
      static_cast<unsigned long long>(driver.calls.load() - calls_before));

  TearDownThroughTheAgent(root, *stub, volumes);
  Stop(agent, SIGTERM);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int volumes = 1000;
  int idle_seconds = 60;
  CLI::App app{"reconciler benchmark (run as root)"};
  app.add_option("--volumes", volumes)->capture_default_str();
  app.add_option("--idle-seconds", idle_seconds)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // $TMPDIR (default /tmp) holds the agent's state: the filesystem the records are written to.
  const char* tmpdir = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): no threads yet.
  std::string root_template =
      std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") + "/shrb.XXXXXX";
  const std::string root = mkdtemp(root_template.data());
  for (const char* d : {"/m", "/src", "/drv", "/base", "/state"}) {
    (void)stagehand::MakeDirs(root + d, 0755);
  }
  // A tmpfs as the source of every bind mount, so that a mount point differs from its parent.
  if (mount("tmpfs", (root + "/src").c_str(), "tmpfs", 0, "size=1m") != 0) {
    std::cerr << "cannot mount a tmpfs on " << root << "/src\n";
    return 1;
  }
  MemoryDriver driver(root + "/src");
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + root + "/drv/csi.sock", grpc::InsecureServerCredentials());
  builder.RegisterService(static_cast<csi::v1::Identity::Service*>(&driver));
  builder.RegisterService(static_cast<csi::v1::Node::Service*>(&driver));
  auto server = builder.BuildAndStart();
  stagehand::registration::RegistrarOptions registrar_options;
  registrar_options.registration_dir = root + "/state/plugins_registry";
  registrar_options.driver_name = "mem.bench.dev";
  registrar_options.endpoint = root + "/drv/csi.sock";
  auto registrar = stagehand::registration::Registrar::Start(registrar_options);
  if (!server || !registrar.ok()) {
    std::cerr << "cannot start the in-memory driver\n";
    return 1;
  }
  const int result = RunBenchmark(root, driver, volumes, idle_seconds);
  registrar->reset();
  server->Shutdown();
  umount2((root + "/src").c_str(), 0);
  (void)stagehand::RunProcess({"rm", "-rf", "--one-file-system", root});
  return result;
}
