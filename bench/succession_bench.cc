// succession_bench: how long a volume's I/O stalls when its session process is SIGKILLed (its
// keeper starts a successor that takes over the FUSE connection) and when it is upgraded in
// place (an agent with another session build replaces it through the handover), while fio
// writes and verifies through the volume. A probe thread writes 4 KiB with O_DIRECT and
// fdatasync in a loop and records each completion; an event's stall is the longest gap between
// completions from the kill (or the agent's restart) until the successor serves. The baseline,
// measured in the same run, is the longest gap in the second before each event: how long the probe
// may wait without any.
//
//   succession_bench [--events 10]        (root; fio installed)

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/escaping.h>
#include <absl/strings/match.h>

#include "base/build_id.h"
#include "base/file_io.h"
#include "base/paths.h"
#include "base/spawn.h"
#include "base/subprocess.h"
#include "bench/bench_support.h"
#include "proto/state.pb.h"
#include "testbed/stagehand_daemon.h"
#include "testbed/tgtd.h"
#include <CLI/CLI.hpp>

namespace {

using namespace stagehand;           // NOLINT(google-build-using-namespace): benchmark main.
using namespace stagehand::testbed;  // NOLINT(google-build-using-namespace): benchmark main.
using Clock = std::chrono::steady_clock;
using bench::Check;
using bench::Die;
using bench::Median;
using state::v1::SessionStatus;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Writes 4 KiB blocks (O_DIRECT, then fdatasync) in a loop and records when each completed.
class Probe {
 public:
  explicit Probe(const std::string& file) {
    fd_ = open(file.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    if (fd_ < 0 || posix_memalign(&block_, 4096, 4096) != 0) {
      Die("probe file " + file);
    }
    std::fill_n(static_cast<char*>(block_), 4096, 'p');
    thread_ = std::thread([this] { Run(); });
  }

  ~Probe() {
    stop_ = true;
    thread_.join();
    close(fd_);
    std::free(block_);
  }

  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  int errors() const { return errors_; }

  size_t completions() const {
    std::lock_guard lock(mu_);
    return done_.size();
  }

  // The longest gap between completions that overlaps [from, to] (from the last completion
  // before `from` on). Negative until a completion follows `to`.
  double LongestGapAcross(Clock::time_point from, Clock::time_point to) const {
    std::lock_guard lock(mu_);
    auto first = std::upper_bound(done_.begin(), done_.end(), from);
    if (first == done_.begin() || std::upper_bound(done_.begin(), done_.end(), to) == done_.end()) {
      return -1;
    }
    double longest = 0;
    for (auto it = first - 1; it + 1 < done_.end() && *it < to; ++it) {
      longest = std::max(longest, Seconds(*(it + 1) - *it));
    }
    return longest;
  }

  // The longest gap between completions within [from, to].
  double LongestGap(Clock::time_point from, Clock::time_point to) const {
    std::lock_guard lock(mu_);
    double longest = 0;
    for (auto it = std::lower_bound(done_.begin(), done_.end(), from);
         it + 1 < done_.end() && *(it + 1) <= to; ++it) {
      longest = std::max(longest, Seconds(*(it + 1) - *it));
    }
    return longest;
  }

 private:
  void Run() {
    uint64_t n = 0;
    while (!stop_) {
      const off_t at = static_cast<off_t>((n++ % 1024) * 4096);
      if (pwrite(fd_, block_, 4096, at) != 4096 || fdatasync(fd_) != 0) {
        ++errors_;
        continue;
      }
      std::lock_guard lock(mu_);
      done_.push_back(Clock::now());
    }
  }

  int fd_ = -1;
  void* block_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int> errors_{0};
  mutable std::mutex mu_;
  std::vector<Clock::time_point> done_;
  std::thread thread_;
};

// fio writing (4 KiB random, direct, fsync every 8) and verifying until stopped.
class Fio {
 public:
  Fio(const std::string& file, std::string output) : output_(std::move(output)) {
    const std::vector<std::string> argv = {
        "/usr/bin/fio", "--name=succession", "--filename=" + file, "--size=64M", "--bs=4k",
        "--rw=randwrite", "--ioengine=psync", "--direct=1", "--fsync=8", "--verify=crc32c",
        "--verify_backlog=256", "--verify_fatal=1", "--time_based", "--runtime=3600",
        "--output-format=terse", "--output=" + output_,
        // No verify-state file in the working directory.
        "--verify_state_save=0"};
    std::vector<char*> cargv = SpawnArgv(argv);
    if (posix_spawn(&pid_, cargv[0], nullptr, nullptr, cargv.data(), environ) != 0) {
      Die("start fio");
    }
  }

  ~Fio() { Stop(); }

  Fio(const Fio&) = delete;
  Fio& operator=(const Fio&) = delete;

  // Stops it (SIGINT: it finishes the verification in flight) and returns fio's error code
  // (terse field 5; 0: no I/O error, no verification failure), or -1 without a report.
  int Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGINT);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    auto text = ReadFileToString(output_);
    if (!text.ok()) {
      return -1;
    }
    // Terse v3: "3;fio-x;name;groupid;error;..."
    size_t at = 0;
    for (int field = 0; field < 4 && at != std::string::npos; ++field) {
      at = text->find(';', at + (field == 0 ? 0 : 1));
    }
    return at == std::string::npos ? -1 : std::atoi(text->c_str() + at + 1);
  }

 private:
  std::string output_;
  pid_t pid_ = -1;
};

// A copy of `binary` whose GNU build ID differs (its code the same): another build, as far as
// the agent can tell.
std::string OtherBuild(const std::string& binary, const std::string& dir) {
  auto id = FileBuildId(binary);
  auto bytes = ReadFileToString(binary);
  if (!id.ok() || !bytes.ok()) {
    Die("read " + binary);
  }
  const size_t at = bytes->find(absl::HexStringToBytes(*id));
  if (at == std::string::npos) {
    Die("no build ID in " + binary);
  }
  (*bytes)[at] = static_cast<char>(~(*bytes)[at]);
  const std::string copy = dir + "/stagehand-session";
  Check(WriteFileAtomically(copy, *bytes, 0755), "write " + copy);
  return copy;
}

class Volume {
 public:
  explicit Volume(std::string runtime_dir) : runtime_dir_(std::move(runtime_dir)) {}

  std::string SessionDir() const {
    auto out = RunProcess({"ls", runtime_dir_ + "/sessions"});
    return runtime_dir_ + "/sessions/" +
           (out.ok() ? out->output.substr(0, out->output.find('\n')) : "");
  }

  SessionStatus Status() const {
    SessionStatus s;
    (void)s.ParseFromString(ReadFileToString(SessionDir() + "/status").value_or(""));
    return s;
  }

  // Waits (polling: a benchmark, not a test) up to a minute for the status to satisfy `done`.
  void WaitFor(const std::function<bool(const SessionStatus&)>& done,
               const std::string& what) const {
    const auto deadline = Clock::now() + std::chrono::minutes(1);
    while (!done(Status())) {
      if (Clock::now() > deadline) {
        Die(what);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  std::string runtime_dir_;
};

struct Figures {
  std::vector<double> stalls;
  std::vector<double> quiet;  // The longest gap in the second before each event.
};

// Waits until the probe has gone on for a second after the last event.
void Settle(const Probe& probe) {
  const size_t before = probe.completions();
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < until || probe.completions() < before + 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// An event from `at` until `done` (the successor serves).
void Record(const Probe& probe, Clock::time_point at, Clock::time_point done, Figures* f) {
  while (probe.LongestGapAcross(at, done) < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  f->stalls.push_back(probe.LongestGapAcross(at, done));
  f->quiet.push_back(probe.LongestGap(at - std::chrono::seconds(1), at));
}

void Print(const char* what, const Figures& f) {
  const double stall = Median(f.stalls);
  const double quiet = Median(f.quiet);
  std::printf(
      "  %-22s median stall %6.3f s  (max %6.3f s)   longest pause without one %6.3f s   "
      "ratio %6.1f   (aim: median < 2 s)\n",
      what, stall, *std::max_element(f.stalls.begin(), f.stalls.end()), quiet,
      quiet > 0 ? stall / quiet : 0);
}

// Stages and publishes the benchmark's volume on `tgtd`'s LUN 1 through `daemon`; returns the
// publish request (its target path is where the application writes).
csi::v1::NodePublishVolumeRequest StageAndPublish(testbed::StagehandDaemon& daemon,
                                                  const testbed::Tgtd& tgtd,
                                                  const std::string& root) {
  csi::v1::NodeStageVolumeRequest stage;
  stage.set_volume_id("succession");
  stage.set_staging_target_path(root + "/stage");
  stage.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
  stage.mutable_volume_capability()->mutable_access_mode()->set_mode(
      csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  (*stage.mutable_volume_context())["targetPortal"] = tgtd.portal();
  (*stage.mutable_volume_context())["iqn"] = "iqn.2026-12.dev.stagehand:succession";
  (*stage.mutable_volume_context())["lun"] = "1";
  csi::v1::NodePublishVolumeRequest publish;
  publish.set_volume_id(stage.volume_id());
  publish.set_staging_target_path(stage.staging_target_path());
  publish.set_target_path(root + "/pod");
  *publish.mutable_volume_capability() = stage.volume_capability();
  csi::v1::NodeStageVolumeResponse r1;
  csi::v1::NodePublishVolumeResponse r2;
  Check(daemon.node().NodeStageVolume(testbed::Ctx().get(), stage, &r1), "stage");
  Check(daemon.node().NodePublishVolume(testbed::Ctx().get(), publish, &r2), "publish");
  return publish;
}

}  // namespace

int main(int argc, char** argv) {
  int events = 10;
  CLI::App app{"session succession: I/O stall of a SIGKILL and of an upgrade in place"};
  app.add_option("--events", events, "Kills, then upgrades")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    Die("run as root");
  }
  if (access("/usr/bin/fio", X_OK) != 0) {
    Die("install fio (scripts/install-deps)");
  }
  const std::string root = testbed::MakeTempRoot();
  const std::string current = JoinPath(ParentDir(testbed::StagehandBinary()), "stagehand-session");
  const std::string other = OtherBuild(current, root);
  const std::string binaries[2] = {current, other};
  const std::string builds[2] = {FileBuildId(current).value_or(""),
                                 FileBuildId(other).value_or("")};

  testbed::Tgtd tgtd;
  Check(tgtd.Start(), "start tgtd");
  const std::string lun = root + "/lun.img";
  Check(testbed::MakeSparseFile(lun, 1ull << 30), "lun file");
  Check(tgtd.AddTarget(1, "iqn.2026-12.dev.stagehand:succession"), "target");
  Check(tgtd.AddLun(1, 1, lun), "lun");
  testbed::StagehandDaemon daemon(root, {"--no-watch-plugins", "--session-binary=" + current});
  Check(daemon.Start(), "start stagehand");
  const csi::v1::NodePublishVolumeRequest publish = StageAndPublish(daemon, tgtd, root);
  Volume volume(daemon.runtime_dir());

  Figures kills, upgrades;
  int fio_error = 0;
  int probe_errors = 0;
  {
    Fio fio(publish.target_path() + "/fio.dat", root + "/fio.terse");
    Probe probe(publish.target_path() + "/probe.dat");
    Settle(probe);
    for (int i = 0; i < events; ++i) {
      const int pid = volume.Status().pid();
      const auto at = Clock::now();
      kill(pid, SIGKILL);
      volume.WaitFor(
          [pid](const SessionStatus& s) {
            return s.pid() != pid && s.took_over() && s.state() == SessionStatus::UP;
          },
          "no successor after a kill");
      Record(probe, at, Clock::now(), &kills);
      Settle(probe);
    }
    for (int i = 0; i < events; ++i) {
      const int next = (i + 1) % 2;  // Starts on `current`: the first upgrade goes to `other`.
      daemon.Stop();
      daemon.set_extra_flags({"--no-watch-plugins", "--session-binary=" + binaries[next]});
      const auto at = Clock::now();
      Check(daemon.Start(), "restart stagehand");
      volume.WaitFor(
          [&](const SessionStatus& s) {
            return s.build() == builds[next] && s.took_over() && s.state() == SessionStatus::UP;
          },
          "no upgrade in place");
      Record(probe, at, Clock::now(), &upgrades);
      Settle(probe);
    }
    probe_errors = probe.errors();
    fio_error = fio.Stop();
  }

  csi::v1::NodeUnpublishVolumeRequest unpublish;
  unpublish.set_volume_id(publish.volume_id());
  unpublish.set_target_path(publish.target_path());
  csi::v1::NodeUnstageVolumeRequest unstage;
  unstage.set_volume_id(publish.volume_id());
  unstage.set_staging_target_path(publish.staging_target_path());
  csi::v1::NodeUnpublishVolumeResponse r3;
  csi::v1::NodeUnstageVolumeResponse r4;
  Check(daemon.node().NodeUnpublishVolume(testbed::Ctx().get(), unpublish, &r3), "unpublish");
  Check(daemon.node().NodeUnstageVolume(testbed::Ctx().get(), unstage, &r4), "unstage");
  daemon.Stop();
  testbed::ForceCleanup(root);

  std::printf(
      "session succession, %d of each, under fio --verify (4 KiB direct random writes, fsync "
      "every 8) and a probe (4 KiB direct write + fdatasync in a loop):\n",
      events);
  Print("SIGKILL of the session", kills);
  Print("upgrade in place", upgrades);
  std::printf("  fio error code %d (0: no I/O error, no verification failure), probe errors %d\n",
              fio_error, probe_errors);
  return fio_error == 0 && probe_errors == 0 ? 0 : 1;
}
