#include "testbed/stagehand_daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "proto/state.pb.h"
#include "transport/userspace/loop_device.h"

namespace stagehand::testbed {
namespace {

std::vector<std::string> MountsUnder(const std::string& root) {
  std::vector<std::string> out;
  auto text = ReadFileToString("/proc/self/mountinfo");
  if (!text.ok()) {
    return out;
  }
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() > 4 && IsPathWithin(f[4], root)) {
      out.push_back(f[4]);
    }
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> LoopsUnder(const std::string& root) {
  std::vector<std::pair<std::string, std::string>> out;
  DIR* d = opendir("/sys/block");
  if (d == nullptr) {
    return out;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (!name.starts_with("loop")) {
      continue;
    }
    auto backing = transport::userspace::LoopBackingFile("/dev/" + name);
    if (backing && backing->starts_with(root + "/")) {
      out.emplace_back("/dev/" + name, *backing);
    }
  }
  closedir(d);
  return out;
}

namespace {

// Every session status under `root`.
std::vector<state::v1::SessionStatus> SessionStatusesUnder(const std::string& root) {
  std::vector<state::v1::SessionStatus> out;
  const std::string sessions = root + "/run/sessions";
  DIR* d = opendir(sessions.c_str());
  if (d == nullptr) {
    return out;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") {
      continue;
    }
    auto raw = ReadFileToString(sessions + "/" + name + "/status");
    state::v1::SessionStatus st;
    if (raw.ok() && st.ParseFromString(*raw)) {
      out.push_back(std::move(st));
    }
  }
  closedir(d);
  return out;
}

}  // namespace

std::vector<int> SessionPidsUnder(const std::string& root) {
  std::vector<int> out;
  for (const auto& st : SessionStatusesUnder(root)) {
    if (st.pid() > 0 && ProcessStartTime(st.pid()) != 0) {
      out.push_back(st.pid());
    }
  }
  return out;
}

std::vector<int> KeeperPidsUnder(const std::string& root) {
  std::vector<int> out;
  for (const auto& st : SessionStatusesUnder(root)) {
    if (st.keeper_pid() > 0 && IsSameProcessAlive(st.keeper_pid(), st.keeper_start_time())) {
      out.push_back(st.keeper_pid());
    }
  }
  return out;
}

bool IntegrationEnabled() {
  const char* v = getenv("SH_INTEGRATION");  // NOLINT(concurrency-mt-unsafe): test setup.
  return geteuid() == 0 && v != nullptr && std::string(v) == "1";
}

std::string StagehandBinary() {
  return STAGEHAND_BINARY;
}

std::string MakeTempRoot() {
  char tmpl[] = "/tmp/shXXXXXX";
  char* dir = mkdtemp(tmpl);
  return dir == nullptr ? "" : std::string(dir);
}

absl::Status MakeSparseFile(const std::string& path, uint64_t bytes) {
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    return ErrnoStatus(errno, "create " + path);
  }
  int rc = ftruncate(fd, static_cast<off_t>(bytes));
  close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoStatus(errno, "truncate " + path);
}

std::unique_ptr<grpc::ClientContext> Ctx(int seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

StagehandDaemon::StagehandDaemon(std::string root, std::vector<std::string> extra_flags)
    : root_(std::move(root)), socket_(root_ + "/csi.sock"), extra_flags_(std::move(extra_flags)) {}

StagehandDaemon::~StagehandDaemon() {
  Kill();
}

absl::Status StagehandDaemon::Start() {
  std::vector<std::string> args = {StagehandBinary(), "--csi-endpoint=" + endpoint(),
                                   "--state-dir=" + state_dir(), "--runtime-dir=" + runtime_dir(),
                                   "--manifest-dir=" + root_ + "/manifests",
                                   "--metrics-address=127.0.0.1:0",
                                   // These suites test the userspace data path, also on hosts
                                   // whose kernel has an initiator (auto would pick it).
                                   "--iscsi-transport=userspace", "--log-level=debug"};
  if (std::none_of(extra_flags_.begin(), extra_flags_.end(),
                   [](const std::string& f) { return f.starts_with("--node-id"); })) {
    args.emplace_back("--node-id=it-node");  // A second node of a test names its own.
  }
  args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());
  const std::string log = root_ + "/daemon.log";
  pid_ = fork();
  if (pid_ < 0) {
    return ErrnoStatus(errno, "fork");
  }
  if (pid_ == 0) {
    // Cores allowed and landing in the root, as a careless host would have it: a core of a
    // process that holds secrets would show there.
    const rlimit unlimited{RLIM_INFINITY, RLIM_INFINITY};
    (void)setrlimit(RLIMIT_CORE, &unlimited);
    if (chdir(root_.c_str()) != 0) {
      _exit(126);
    }
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // A private subchannel pool: after a restart, a shared pool could hand back the connection to
  // the killed daemon, which looks READY until the first call fails.
  grpc::ChannelArguments channel_args;
  channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  node_.reset();
  identity_.reset();
  channel_ = grpc::CreateCustomChannel("unix:" + socket_, grpc::InsecureChannelCredentials(),
                                       channel_args);
  // Event-driven wait: gRPC connects as soon as the socket listens.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(20);
  while (!channel_->WaitForConnected(deadline)) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      auto text = ReadFileToString(log);
      return absl::InternalError("stagehand exited at startup: " + text.value_or(""));
    }
    if (std::chrono::system_clock::now() >= deadline) {
      return absl::DeadlineExceededError("stagehand did not listen within 20 s");
    }
  }
  node_ = csi::v1::Node::NewStub(channel_);
  identity_ = csi::v1::Identity::NewStub(channel_);
  return absl::OkStatus();
}

void StagehandDaemon::Kill() {
  if (pid_ <= 0) {
    return;
  }
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

int StagehandDaemon::Stop() {
  if (pid_ <= 0) {
    return -1;
  }
  // Drop our idle connection first: the daemon's gRPC shutdown waits for connected clients.
  node_.reset();
  identity_.reset();
  channel_.reset();
  kill(pid_, SIGTERM);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void ForceCleanup(const std::string& root) {
  if (root.empty()) {
    return;
  }
  // Order matters: filesystems on the loop devices first (deepest first), then the loop devices
  // (while their FUSE backing path still resolves), then session processes, then FUSE mounts.
  const std::string sessions = root + "/run/sessions";
  for (int round = 0; round < 4; ++round) {
    auto mounts = MountsUnder(root);
    std::erase_if(mounts, [&](const std::string& m) { return IsPathWithin(m, sessions); });
    if (mounts.empty()) {
      break;
    }
    std::sort(mounts.begin(), mounts.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (const auto& m : mounts) {
      if (umount2(m.c_str(), 0) != 0) {
        umount2(m.c_str(), MNT_DETACH);
      }
    }
  }
  for (const auto& [dev, backing] : LoopsUnder(root)) {
    (void)transport::userspace::DetachLoopDevice(dev, backing);
  }
  // Keepers first: they would start a killed session process again.
  for (int pid : KeeperPidsUnder(root)) {
    kill(pid, SIGKILL);
  }
  for (int pid : SessionPidsUnder(root)) {
    kill(pid, SIGKILL);
  }
  for (const auto& m : MountsUnder(root)) {
    umount2(m.c_str(), MNT_DETACH);
  }
  (void)RunProcess({"rm", "-rf", "--one-file-system", root});
}

namespace {

// Processes of the binary under test in the session role; keepers or not.
std::vector<int> RunningSessionRole(bool keepers) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) {
    return out;
  }
  while (dirent* e = readdir(d)) {
    const int pid = atoi(e->d_name);
    if (pid <= 0) {
      continue;
    }
    std::array<char, 4096> exe{};
    const std::string link = "/proc/" + std::to_string(pid) + "/exe";
    const ssize_t n = readlink(link.c_str(), exe.data(), exe.size() - 1);
    auto cmdline = ReadFileToString("/proc/" + std::to_string(pid) + "/cmdline");
    const std::string path(exe.data(), n > 0 ? static_cast<size_t>(n) : 0);
    const bool ours = path == StagehandBinary() ||
                      path == JoinPath(ParentDir(StagehandBinary()), "stagehand-session");
    const bool keeper = cmdline.ok() && cmdline->find("--keeper") != std::string::npos;
    if (ours && cmdline.ok() && cmdline->find("__session") != std::string::npos &&
        keeper == keepers && ProcessStartTime(pid) != 0) {
      out.push_back(pid);
    }
  }
  closedir(d);
  return out;
}

}  // namespace

std::vector<int> RunningSessionProcesses() {
  return RunningSessionRole(/*keepers=*/false);
}

std::vector<int> RunningSessionKeepers() {
  return RunningSessionRole(/*keepers=*/true);
}

void KillSessionsForGood() {
  const std::vector<int> sessions = RunningSessionProcesses();
  for (int pid : sessions) {
    kill(pid, SIGSTOP);
  }
  std::vector<int> pids = RunningSessionKeepers();
  for (int pid : pids) {
    kill(pid, SIGKILL);
  }
  for (int pid : pids) {
    while (ProcessStartTime(pid) != 0) {
      std::this_thread::yield();
    }
  }
  pids = RunningSessionProcesses();
  for (int pid : pids) {
    kill(pid, SIGKILL);
  }
  for (int pid : pids) {
    while (ProcessStartTime(pid) != 0) {
      std::this_thread::yield();
    }
  }
}

std::vector<std::string> Leftovers(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& m : MountsUnder(root)) {
    out.push_back("mount " + m);
  }
  for (const auto& [dev, backing] : LoopsUnder(root)) {
    out.push_back("loop device " + dev + " -> " + backing);
  }
  for (int pid : SessionPidsUnder(root)) {
    out.push_back("session process " + std::to_string(pid));
  }
  for (int pid : KeeperPidsUnder(root)) {
    out.push_back("session keeper " + std::to_string(pid));
  }
  // A session's runtime directory outlives nothing of it: unstage removes it.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/run/sessions", ec)) {
    out.push_back("session runtime directory " + entry.path().string());
  }
  return out;
}

bool WriteControl(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

absl::Status AbortFuseConnection(const std::string& mountpoint) {
  constexpr char kControl[] = "/sys/fs/fuse/connections";
  constexpr decltype(statfs::f_type) kControlMagic = 0x65735543;  // FUSE_CTL_SUPER_MAGIC

  struct statfs control {};

  const bool mount_control = statfs(kControl, &control) == 0 && control.f_type != kControlMagic;
  if (mount_control && mount("fusectl", kControl, "fusectl", 0, nullptr) != 0) {
    return ErrnoStatus(errno, "mount fusectl");
  }

  // The connection's directory is named after the mount's device number as the kernel keeps it.
  struct stat fuse {};

  absl::Status aborted = absl::OkStatus();
  if (stat(mountpoint.c_str(), &fuse) != 0) {
    aborted = ErrnoStatus(errno, absl::StrCat("stat '", mountpoint, "'"));
  } else if (!WriteControl(absl::StrCat(kControl, "/",
                                        (major(fuse.st_dev) << 20) | minor(fuse.st_dev), "/abort"),
                           "1")) {
    aborted = ErrnoStatus(errno, "write the connection's abort file");
  }
  if (mount_control) {
    umount2(kControl, 0);
  }
  return aborted;
}

bool WriteDurably(const std::string& path, const std::string& content) {
  const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    return false;
  }
  const bool ok =
      write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
      fsync(fd) == 0;
  return close(fd) == 0 && ok;
}

int WriteBlockDirect(const std::string& device, off_t offset, char fill) {
  const int fd = open(device.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  void* buf = nullptr;
  if (posix_memalign(&buf, 4096, 4096) != 0) {
    close(fd);
    return ENOMEM;
  }
  memset(buf, fill, 4096);
  const int err = pwrite(fd, buf, 4096, offset) == 4096 ? 0 : (errno != 0 ? errno : EIO);
  free(buf);
  close(fd);
  return err;
}

}  // namespace stagehand::testbed
