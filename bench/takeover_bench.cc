// takeover_bench: how long a node waits for a LUN whose holder died, against a real tgtd with two
// real agents (node ids and initiator names of their own). Node A stages a single-node block
// volume (reserved) and publishes it; node B's stage is refused once; then every process of node
// A is stopped (SIGSTOP of the agent, the session and its keeper: a node that hangs or is cut
// off) and node B stages in a loop, as the kubelet retries, until it takes the LUN over. The
// figure is the time from the freeze to B's successful stage; the bound the design promises is
// takeoverAfter plus one renewal period (a third of takeoverAfter). The baseline, measured in the
// same run, is the orderly hand-off: the holder unstages and the other node stages at once.
//
//   takeover_bench [--runs 3] [--takeover-after 30]        (root)

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "bench/bench_support.h"
#include "proto/state.pb.h"
#include "testbed/stagehand_daemon.h"
#include "testbed/tgtd.h"
#include <CLI/CLI.hpp>

namespace {

using namespace stagehand;  // NOLINT(google-build-using-namespace): benchmark main.
using Clock = std::chrono::steady_clock;
using bench::Check;
using bench::Die;
using AccessMode = csi::v1::VolumeCapability::AccessMode;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Every thread of `pid` onto CPU `cpu` (tgtd has worker threads).
void PinProcess(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  auto tasks = RunProcess({"ls", "/proc/" + std::to_string(pid) + "/task"});
  Check(tasks.ok() ? absl::OkStatus() : tasks.status(), "list tgtd's threads");
  size_t start = 0;
  const std::string& out = tasks->output;
  while (start < out.size()) {
    const size_t end = out.find('\n', start);
    const std::string tid = out.substr(start, end - start);
    if (!tid.empty()) {
      (void)sched_setaffinity(std::atoi(tid.c_str()), sizeof(set), &set);
    }
    start = end == std::string::npos ? out.size() : end + 1;
  }
}

// What node A's (only) session says of itself.
state::v1::SessionStatus SessionOf(const testbed::StagehandDaemon& node) {
  auto dirs = RunProcess({"ls", node.runtime_dir() + "/sessions"});
  state::v1::SessionStatus s;
  if (dirs.ok()) {
    const std::string dir =
        node.runtime_dir() + "/sessions/" + dirs->output.substr(0, dirs->output.find('\n'));
    (void)s.ParseFromString(ReadFileToString(dir + "/status").value_or(""));
  }
  return s;
}

struct Requests {
  csi::v1::NodeStageVolumeRequest stage;
  csi::v1::NodePublishVolumeRequest publish;
  csi::v1::NodeUnpublishVolumeRequest unpublish;
  csi::v1::NodeUnstageVolumeRequest unstage;
};

Requests RequestsFor(const std::string& root, const std::string& volume, const std::string& portal,
                     const std::string& iqn, int takeover_after) {
  Requests r;
  r.stage.set_volume_id(volume);
  r.stage.set_staging_target_path(root + "/stage-" + volume);
  r.stage.mutable_volume_capability()->mutable_block();
  r.stage.mutable_volume_capability()->mutable_access_mode()->set_mode(
      AccessMode::SINGLE_NODE_WRITER);
  auto& context = *r.stage.mutable_volume_context();
  context["targetPortal"] = portal;
  context["iqn"] = iqn;
  context["lun"] = "1";
  context["takeoverAfter"] = std::to_string(takeover_after);
  r.publish.set_volume_id(volume);
  r.publish.set_staging_target_path(r.stage.staging_target_path());
  r.publish.set_target_path(root + "/dev-" + volume);
  *r.publish.mutable_volume_capability() = r.stage.volume_capability();
  r.unpublish.set_volume_id(volume);
  r.unpublish.set_target_path(r.publish.target_path());
  r.unstage.set_volume_id(volume);
  r.unstage.set_staging_target_path(r.stage.staging_target_path());
  return r;
}

void StageAndPublish(testbed::StagehandDaemon& node, const Requests& r, const std::string& who) {
  csi::v1::NodeStageVolumeResponse staged;
  csi::v1::NodePublishVolumeResponse published;
  Check(node.node().NodeStageVolume(testbed::Ctx().get(), r.stage, &staged), who + " stage");
  Check(node.node().NodePublishVolume(testbed::Ctx().get(), r.publish, &published),
        who + " publish");
}

void UnpublishAndUnstage(testbed::StagehandDaemon& node, const Requests& r,
                         const std::string& who) {
  csi::v1::NodeUnpublishVolumeResponse unpublished;
  csi::v1::NodeUnstageVolumeResponse unstaged;
  Check(node.node().NodeUnpublishVolume(testbed::Ctx().get(), r.unpublish, &unpublished),
        who + " unpublish");
  Check(node.node().NodeUnstageVolume(testbed::Ctx().get(), r.unstage, &unstaged),
        who + " unstage");
}

// Stages until the stage succeeds; every failure must be the retryable refusal.
int StageUntilTaken(testbed::StagehandDaemon& node, const Requests& r) {
  for (int refusals = 0;; ++refusals) {
    csi::v1::NodeStageVolumeResponse staged;
    const grpc::Status s = node.node().NodeStageVolume(testbed::Ctx().get(), r.stage, &staged);
    if (s.ok()) {
      return refusals;
    }
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
      Die("node B's stage: " + s.error_message());
    }
  }
}

struct Run {
  double takeover = 0;
  double handoff = 0;
  int refusals = 0;
};

Run OneRun(testbed::Tgtd& tgtd, testbed::StagehandDaemon& a, testbed::StagehandDaemon& b,
           const std::string& root, int i, int takeover_after) {
  const std::string lun = root + "/lun" + std::to_string(i) + ".img";
  const std::string iqn = "iqn.2026-12.dev.stagehand:takeover-" + std::to_string(i);
  Check(testbed::MakeSparseFile(lun, 64ull << 20), "lun file");
  Check(tgtd.AddTarget(i, iqn), "target");
  Check(tgtd.AddLun(i, 1, lun), "lun");
  const std::string volume = "takeover-" + std::to_string(i);
  const Requests on_a = RequestsFor(root + "/a", volume, tgtd.portal(), iqn, takeover_after);
  const Requests on_b = RequestsFor(root + "/b", volume, tgtd.portal(), iqn, takeover_after);
  Run run;

  StageAndPublish(a, on_a, "node A");
  csi::v1::NodeStageVolumeResponse staged;
  const grpc::Status first = b.node().NodeStageVolume(testbed::Ctx().get(), on_b.stage, &staged);
  if (first.error_code() != grpc::StatusCode::UNAVAILABLE) {
    Die("node B's first stage was not refused: " + first.error_message());
  }
  const state::v1::SessionStatus session = SessionOf(a);
  const std::vector<int> node_a = {a.pid(), static_cast<int>(session.pid()),
                                   static_cast<int>(session.keeper_pid())};
  const auto frozen = Clock::now();
  for (int pid : node_a) {
    if (pid > 0) {
      (void)kill(pid, SIGSTOP);
    }
  }
  run.refusals = StageUntilTaken(b, on_b);
  run.takeover = Seconds(Clock::now() - frozen);
  for (int pid : node_a) {
    if (pid > 0) {
      (void)kill(pid, SIGCONT);
    }
  }
  UnpublishAndUnstage(a, on_a, "node A (fenced)");

  // The orderly hand-off back: B unstages, A stages at once.
  const auto handoff = Clock::now();
  csi::v1::NodeUnstageVolumeResponse unstaged;
  Check(b.node().NodeUnstageVolume(testbed::Ctx().get(), on_b.unstage, &unstaged), "B unstage");
  Check(a.node().NodeStageVolume(testbed::Ctx().get(), on_a.stage, &staged), "A stage again");
  run.handoff = Seconds(Clock::now() - handoff);
  Check(a.node().NodeUnstageVolume(testbed::Ctx().get(), on_a.unstage, &unstaged), "A unstage");
  (void)tgtd.DeleteTarget(i);
  unlink(lun.c_str());
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3;
  int takeover_after = 30;
  CLI::App app{"takeover of a dead holder's LUN: stagehand's wait vs. takeoverAfter"};
  app.add_option("--runs", runs)->check(CLI::Range(1, 20));
  app.add_option("--takeover-after", takeover_after, "Seconds (the volume's takeoverAfter)")
      ->check(CLI::Range(3, 600));
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    Die("run as root");
  }
  const std::string root = testbed::MakeTempRoot();
  testbed::Tgtd tgtd;
  Check(tgtd.Start(), "start tgtd");
  // The target on a CPU of its own, the agents (started from here) on the other.
  PinProcess(tgtd.pid(), 1);
  cpu_set_t own;
  CPU_ZERO(&own);
  CPU_SET(0, &own);
  (void)sched_setaffinity(0, sizeof(own), &own);
  testbed::StagehandDaemon a(root + "/a");
  testbed::StagehandDaemon b(
      root + "/b", {"--node-id=bench-node-b", "--initiator-name=iqn.2026-12.dev.stagehand:node-b"});
  Check(MakeDirs(root + "/a", 0700), "node A's root");
  Check(MakeDirs(root + "/b", 0700), "node B's root");
  Check(a.Start(), "start node A");
  Check(b.Start(), "start node B");

  std::vector<Run> results;
  for (int i = 1; i <= runs; ++i) {
    results.push_back(OneRun(tgtd, a, b, root, i, takeover_after));
  }
  a.Stop();
  b.Stop();
  testbed::ForceCleanup(root + "/a");
  testbed::ForceCleanup(root + "/b");
  testbed::ForceCleanup(root);

  std::vector<double> takeovers;
  std::vector<double> handoffs;
  int refusals = 0;
  for (const Run& r : results) {
    takeovers.push_back(r.takeover);
    handoffs.push_back(r.handoff);
    refusals += r.refusals;
  }
  std::sort(takeovers.begin(), takeovers.end());
  std::sort(handoffs.begin(), handoffs.end());
  const double bound = takeover_after + takeover_after / 3.0;
  const double median = takeovers[takeovers.size() / 2];
  const double handoff = handoffs[handoffs.size() / 2];
  std::printf("takeover of a frozen holder, %d runs (takeoverAfter %d s, renewal every %.1f s):\n",
              runs, takeover_after, takeover_after / 3.0);
  std::printf(
      "  freeze to node B staged: median %6.2f s   max %6.2f s   bound %6.2f s   ratio max/bound "
      "%.2f   (aim <= 1)\n",
      median, takeovers.back(), bound, takeovers.back() / bound);
  std::printf(
      "  orderly hand-off (unstage, then stage on the other node): median %6.3f s   takeover/"
      "hand-off %.0f\n",
      handoff, median / handoff);
  std::printf("  refused stages while waiting: %d in all\n", refusals);
  return 0;
}
