#include "session/keeper_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"
#include "base/service_notify.h"
#include "base/spawn.h"
#include "session/protocol.h"

namespace stagehand::session {
namespace {

// How long the new keeper may take to say where it listens.
constexpr auto kKeeperHelloTimeout = std::chrono::seconds(5);

UniqueFd PidFd(int pid) {
  return UniqueFd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
}

// Starts `argv` from this process's own executable in a new session, with `pass` as
// descriptors 3, 4, ... and nothing else beyond stdin, stdout and stderr, and waits for it to
// exit: the keeper it starts (`--adopt`) forks itself once and leaves the child to init.
//
// posix_spawn, never fork(): a fork write-protects every private page of this process for
// copy-on-write, the FUSE read buffers included; the next read of /dev/fuse then copies a
// request through the slow get_user_pages path, which fails when a fatal signal is pending, and
// the kernel ends that request with EIO. A SIGKILL of the session just after its keeper was
// replaced failed a write of the filesystem that way. posix_spawn shares the address space with
// its child until the exec (CLONE_VM | CLONE_VFORK): nothing here is write-protected.
absl::Status SpawnFromSelf(const std::vector<std::string>& argv, const std::vector<int>& pass) {
  std::vector<UniqueFd> high;
  for (int fd : pass) {
    high.emplace_back(fcntl(fd, F_DUPFD_CLOEXEC, 64));
    if (!high.back()) {
      return ErrnoStatus(errno, "duplicate a descriptor for the new keeper");
    }
  }
  std::vector<char*> cargv = SpawnArgv(argv);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  if (posix_spawn_file_actions_init(&actions) != 0) {
    return absl::InternalError("posix_spawn_file_actions_init failed");
  }
  absl::Cleanup free_actions = [&actions] { posix_spawn_file_actions_destroy(&actions); };
  if (posix_spawnattr_init(&attributes) != 0) {
    return absl::InternalError("posix_spawnattr_init failed");
  }
  absl::Cleanup free_attributes = [&attributes] { posix_spawnattr_destroy(&attributes); };
  int rc = 0;
  for (size_t i = 0; i < high.size() && rc == 0; ++i) {
    rc = posix_spawn_file_actions_adddup2(&actions, high[i].Get(), static_cast<int>(3 + i));
  }
  rc = rc != 0
           ? rc
           : posix_spawn_file_actions_addclosefrom_np(&actions, static_cast<int>(3 + high.size()));
  sigset_t none;
  sigemptyset(&none);
  rc = rc != 0 ? rc : posix_spawnattr_setsigmask(&attributes, &none);
  rc = rc != 0 ? rc
               : posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  pid_t child = 0;
  rc = rc != 0
           ? rc
           : posix_spawn(&child, "/proc/self/exe", &actions, &attributes, cargv.data(), environ);
  if (rc != 0) {
    return ErrnoStatus(rc, "start the new keeper");
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError("the process starting the new keeper failed");
  }
  return absl::OkStatus();
}

// The new keeper's "<pid> <address>\n", read within the timeout.
absl::StatusOr<std::pair<int, std::string>> ReadHello(int fd) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + kKeeperHelloTimeout;
  while (!text.ends_with('\n')) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) == 0) {
      return absl::DeadlineExceededError("the new keeper did not say where it listens");
    }
    std::array<char, 256> buffer{};
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return absl::UnavailableError("the new keeper ended before it listened");
    }
    text.append(buffer.data(), static_cast<size_t>(n));
  }
  const std::vector<std::string> words = absl::StrSplit(text.substr(0, text.size() - 1), ' ');
  int pid = 0;
  if (words.size() != 2 || !absl::SimpleAtoi(words[0], &pid) || pid <= 0 || words[1].empty()) {
    return absl::InternalError("the new keeper said something unreadable");
  }
  return std::make_pair(pid, words[1]);
}

}  // namespace

KeeperWatch KeeperWatch::FromEnvironment() {
  KeeperWatch watch;
  // NOLINTBEGIN(concurrency-mt-unsafe): read only; nothing here sets the environment.
  const char* keeper = getenv(kKeeperVariable);
  const char* notify = getenv("NOTIFY_SOCKET");
  // NOLINTEND(concurrency-mt-unsafe)
  int pid = 0;
  if (keeper == nullptr || notify == nullptr || !absl::SimpleAtoi(keeper, &pid) || pid <= 0) {
    return watch;
  }
  watch.pidfd_ = PidFd(pid);
  // The keeper is the parent until it dies (then init or a subreaper is): checked after the
  // pidfd is open, so that the pidfd cannot name a process that reused the pid.
  if (!watch.pidfd_ || getppid() != pid) {
    watch.pidfd_.Reset();
    watch.lost_already_ = true;
  }
  return watch;
}

absl::StatusOr<int> KeeperWatch::Replace(UniqueFd handover, UniqueFd fuse) {
  pidfd_.Reset();
  lost_already_ = false;
  // The command line this process runs (through a loader, for a relocated bundle), as its
  // keeper's, which adds --keeper.
  SH_ASSIGN_OR_RETURN(const std::string cmdline, ReadFileToString("/proc/self/cmdline"));
  std::vector<std::string> argv = absl::StrSplit(cmdline, '\0', absl::SkipEmpty());
  if (argv.empty()) {
    return absl::InternalError("cannot read this process's command line");
  }
  argv.emplace_back("--keeper");
  argv.push_back(absl::StrCat(kAdoptArgument, getpid()));
  UniqueFd self = PidFd(getpid());
  std::array<int, 2> ready{-1, -1};
  if (!self || pipe2(ready.data(), O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "pidfd or pipe for the new keeper");
  }
  UniqueFd read_end(ready[0]);
  UniqueFd write_end(ready[1]);
  static_assert(kAdoptPidfd == 3 && kAdoptReady == 4 && kAdoptHandover == 5 && kAdoptFuse == 6);
  SH_RETURN_IF_ERROR(
      SpawnFromSelf(argv, {self.Get(), write_end.Get(), handover.Get(), fuse.Get()}));
  write_end.Reset();  // Its end of file means the keeper is gone.
  SH_ASSIGN_OR_RETURN(auto hello, ReadHello(read_end.Get()));
  SetNotifySocket(hello.second);
  pidfd_ = PidFd(hello.first);
  if (!pidfd_) {
    return ErrnoStatus(errno, "watch the new keeper");
  }
  return hello.first;
}

}  // namespace stagehand::session
