// stage_latency_bench: how long a volume takes from NodeStageVolume to published, through the
// daemon's gRPC API against a real tgtd, for a fresh (blank, 1 GiB) LUN and for a re-stage of a
// formatted one. The baseline, measured in the same run, is the same local steps without iSCSI,
// FUSE or the agent: loop device over a local file, mkfs (fresh) or fsck (re-stage), mount, bind.
//
//   stage_latency_bench [--runs 7] [--log FILE]        (root)

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "bench/bench_support.h"
#include "mounter/filesystem.h"
#include "mounter/libmount_mounter.h"
#include "testbed/stagehand_daemon.h"
#include "testbed/tgtd.h"
#include "transport/userspace/loop_device.h"
#include <CLI/CLI.hpp>

namespace {

using namespace stagehand;           // NOLINT(google-build-using-namespace): benchmark main.
using namespace stagehand::testbed;  // NOLINT(google-build-using-namespace): benchmark main.
using Clock = std::chrono::steady_clock;
using bench::Check;
using bench::Die;
using bench::Median;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The bare local steps. Returns milliseconds.
double BareSteps(const std::string& root, const std::string& image, bool fresh) {
  mounter::LibmountMounter m;
  const std::string stage = root + "/bare-stage";
  const std::string target = root + "/bare-pod";
  mkdir(stage.c_str(), 0750);
  mkdir(target.c_str(), 0750);
  const auto start = Clock::now();
  auto dev = transport::userspace::AttachLoopDevice(image, 512);
  Check(dev.status(), "attach loop");
  Check(fresh ? mounter::Format(*dev, "ext4") : mounter::Check(*dev, "ext4"), "mkfs/fsck");
  Check(m.Mount({*dev, stage, "ext4", {}}), "mount");
  Check(m.Bind(stage, target, false, {}), "bind");
  const double ms = Ms(Clock::now() - start);
  Check(m.Unmount(target), "unmount");
  Check(m.Unmount(stage), "unmount");
  Check(transport::userspace::DetachLoopDevice(*dev, image), "detach");
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 7;
  CLI::App app{"stage latency: stagehand vs. the bare local steps"};
  std::string log_copy;
  app.add_option("--runs", runs)->check(CLI::Range(1, 100));
  app.add_option("--log", log_copy, "Keep the agent's debug log (step timings) in this file");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    Die("run as root");
  }
  const std::string root = testbed::MakeTempRoot();
  testbed::Tgtd tgtd;
  Check(tgtd.Start(), "start tgtd");
  testbed::StagehandDaemon daemon(root);
  Check(daemon.Start(), "start stagehand");

  std::vector<double> fresh, restage, bare_fresh, bare_restage;
  for (int i = 1; i <= runs; ++i) {
    const std::string lun = root + "/lun" + std::to_string(i) + ".img";
    const std::string iqn = "iqn.2026-11.dev.stagehand:bench-" + std::to_string(i);
    Check(testbed::MakeSparseFile(lun, 1ull << 30), "lun file");
    Check(tgtd.AddTarget(i, iqn), "target");
    Check(tgtd.AddLun(i, 1, lun), "lun");
    csi::v1::NodeStageVolumeRequest stage;
    stage.set_volume_id("bench-" + std::to_string(i));
    stage.set_staging_target_path(root + "/stage-" + std::to_string(i));
    stage.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
    stage.mutable_volume_capability()->mutable_access_mode()->set_mode(
        csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    (*stage.mutable_volume_context())["targetPortal"] = tgtd.portal();
    (*stage.mutable_volume_context())["iqn"] = iqn;
    (*stage.mutable_volume_context())["lun"] = "1";
    csi::v1::NodePublishVolumeRequest publish;
    publish.set_volume_id(stage.volume_id());
    publish.set_staging_target_path(stage.staging_target_path());
    publish.set_target_path(root + "/pod-" + std::to_string(i));
    *publish.mutable_volume_capability() = stage.volume_capability();
    csi::v1::NodeUnpublishVolumeRequest unpublish;
    unpublish.set_volume_id(stage.volume_id());
    unpublish.set_target_path(publish.target_path());
    csi::v1::NodeUnstageVolumeRequest unstage;
    unstage.set_volume_id(stage.volume_id());
    unstage.set_staging_target_path(stage.staging_target_path());

    for (bool is_fresh : {true, false}) {
      csi::v1::NodeStageVolumeResponse r1;
      csi::v1::NodePublishVolumeResponse r2;
      csi::v1::NodeUnpublishVolumeResponse r3;
      csi::v1::NodeUnstageVolumeResponse r4;
      const auto start = Clock::now();
      Check(daemon.node().NodeStageVolume(testbed::Ctx().get(), stage, &r1), "stage");
      Check(daemon.node().NodePublishVolume(testbed::Ctx().get(), publish, &r2), "publish");
      (is_fresh ? fresh : restage).push_back(Ms(Clock::now() - start));
      Check(daemon.node().NodeUnpublishVolume(testbed::Ctx().get(), unpublish, &r3), "unpublish");
      Check(daemon.node().NodeUnstageVolume(testbed::Ctx().get(), unstage, &r4), "unstage");
    }
    const std::string image = root + "/bare" + std::to_string(i) + ".img";
    Check(testbed::MakeSparseFile(image, 1ull << 30), "bare image");
    bare_fresh.push_back(BareSteps(root, image, true));
    bare_restage.push_back(BareSteps(root, image, false));
    unlink(image.c_str());
    (void)tgtd.DeleteTarget(i);
    unlink(lun.c_str());
  }
  daemon.Stop();
  if (!log_copy.empty()) {
    auto log = ReadFileToString(root + "/daemon.log");
    Check(log.ok() ? WriteFileAtomically(log_copy, *log, 0644) : log.status(), "copy the log");
  }
  testbed::ForceCleanup(root);

  const double f = Median(fresh), r = Median(restage);
  const double bf = Median(bare_fresh), br = Median(bare_restage);
  std::printf("stage latency, median of %d runs (1 GiB LUN, ext4):\n", runs);
  std::printf(
      "  fresh LUN to published:     stagehand %7.1f ms   bare steps %7.1f ms   ratio %.2f"
      "   (aim < 100 ms)\n",
      f, bf, f / bf);
  std::printf(
      "  re-stage of a formatted LUN: stagehand %7.1f ms   bare steps %7.1f ms   ratio %.2f"
      "   (aim < 50 ms)\n",
      r, br, r / br);
  return 0;
}
