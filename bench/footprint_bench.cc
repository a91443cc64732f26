// Idle footprint: threads and resident memory of the real `stagehand` agent with no volumes,
// standalone and in Kubernetes mode, against a floor measured in the same run: a process that
// serves one CSI Identity service with gRPC on a unix socket and does nothing else (what any
// gRPC node plugin costs at least on this machine).
//
//   footprint_bench [--settle-seconds 3]

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "bench/proc_stats.h"
#include "proto/agent.grpc.pb.h"
#include "proto/csi.grpc.pb.h"
#include <CLI/CLI.hpp>

namespace {

using Clock = std::chrono::steady_clock;

class FloorIdentity final : public csi::v1::Identity::Service {
  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* r) override {
    r->set_name("floor.bench.dev");
    r->set_vendor_version("1");
    return grpc::Status::OK;
  }
};

// The floor process: serves until SIGTERM.
int RunFloor(const std::string& socket) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  FloorIdentity identity;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&identity);
  auto server = builder.BuildAndStart();
  if (!server) {
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  server->Shutdown();
  return 0;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "a", stderr);
    std::vector<char*> raw;
    for (const auto& a : argv) {
      raw.push_back(const_cast<char*>(a.c_str()));
    }
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  return pid;
}

void Stop(pid_t pid) {
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

// Calls a unary RPC until it answers (the server is up) or 60 s pass.
template <typename Call>
bool WaitAnswers(Call call) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (call(context)) {
      return true;
    }
  }
  return false;
}

struct Footprint {
  long threads = -1;
  long rss_kb = -1;
  long anon_kb = -1;
};

Footprint Measure(pid_t pid, int settle_seconds) {
  std::this_thread::sleep_for(std::chrono::seconds(settle_seconds));  // Let start-up work end.
  return {stagehand::bench::StatusField(pid, "Threads"),
          stagehand::bench::StatusField(pid, "VmRSS"),
          stagehand::bench::StatusField(pid, "RssAnon")};
}

void Print(const char* what, const Footprint& f, const Footprint& floor) {
  std::printf(
      "%-28s %3ld threads (%.1fx floor)  rss %5.1f MB (%.1fx)  anonymous %4.1f MB (%.1fx)\n", what,
      f.threads, static_cast<double>(f.threads) / static_cast<double>(floor.threads),
      f.rss_kb / 1024.0, static_cast<double>(f.rss_kb) / static_cast<double>(floor.rss_kb),
      f.anon_kb / 1024.0, static_cast<double>(f.anon_kb) / static_cast<double>(floor.anon_kb));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--floor") == 0) {
    return RunFloor(argv[2]);
  }
  int settle_seconds = 3;
  CLI::App app{"idle footprint benchmark (run as root)"};
  app.add_option("--settle-seconds", settle_seconds, "Seconds to wait after start before measuring")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  char root_template[] = "/tmp/shfp.XXXXXX";
  const std::string root = mkdtemp(root_template);
  (void)stagehand::MakeDirs(root + "/m", 0755);
  (void)stagehand::WriteFileAtomically(root + "/config.yaml", "", 0644);
  const std::string log = root + "/log";
  bool ok = true;

  // The floor.
  const std::string floor_socket = root + "/floor.sock";
  pid_t pid = Spawn({"/proc/self/exe", "--floor", floor_socket}, log);
  auto identity = csi::v1::Identity::NewStub(
      grpc::CreateChannel("unix:" + floor_socket, grpc::InsecureChannelCredentials()));
  ok = WaitAnswers([&](grpc::ClientContext& c) {
    csi::v1::GetPluginInfoResponse r;
    return identity->GetPluginInfo(&c, csi::v1::GetPluginInfoRequest(), &r).ok();
  });
  const Footprint floor = Measure(pid, settle_seconds);
  Stop(pid);
  if (!ok) {
    std::cerr << "the floor server did not answer; see " << log << "\n";
    return 1;
  }
  Print("floor (gRPC Identity only)", floor, floor);

  const std::vector<std::string> common = {STAGEHAND_BINARY, "--config=" + root + "/config.yaml",
                                           "--log-level=warn", "--session-launcher=detached",
                                           "--metrics-address=127.0.0.1:0"};

  struct Mode {
    const char* name;
    std::string run;
    std::vector<std::string> flags;
  };

  const std::vector<Mode> modes = {
      {"stagehand standalone, idle",
       root + "/run-s",
       {"--state-dir=" + root + "/state-s", "--runtime-dir=" + root + "/run-s",
        "--manifest-dir=" + root + "/m"}},
      {"stagehand kubernetes, idle",
       root + "/run-k",
       {"--mode=kubernetes", "--node-id=bench", "--kubelet-dir=" + root + "/kubelet",
        "--state-dir=" + root + "/state-k", "--runtime-dir=" + root + "/run-k"}},
  };
  for (const Mode& mode : modes) {
    std::vector<std::string> args = common;
    args.insert(args.end(), mode.flags.begin(), mode.flags.end());
    pid = Spawn(args, log);
    auto agent = stagehand::agent::v1::Agent::NewStub(grpc::CreateChannel(
        "unix:" + mode.run + "/agent.sock", grpc::InsecureChannelCredentials()));
    const bool answered = WaitAnswers([&](grpc::ClientContext& c) {
      stagehand::agent::v1::AgentStatus status;
      return agent->GetStatus(&c, stagehand::agent::v1::GetStatusRequest(), &status).ok();
    });
    // A few calls, as an operator or a probe would make, before measuring.
    for (int i = 0; i < 3 && answered; ++i) {
      grpc::ClientContext c;
      stagehand::agent::v1::AgentStatus status;
      (void)agent->GetStatus(&c, stagehand::agent::v1::GetStatusRequest(), &status);
    }
    const Footprint f = Measure(pid, settle_seconds);
    Stop(pid);
    if (!answered) {
      std::cerr << mode.name << ": the agent did not answer; see " << log << "\n";
      ok = false;
      continue;
    }
    Print(mode.name, f, floor);
  }
  std::printf("aims: at most the floor's threads + 4, rss within 5 %% of the floor's\n");
  (void)stagehand::RunProcess({"rm", "-rf", "--one-file-system", root});
  return ok ? 0 : 1;
}
