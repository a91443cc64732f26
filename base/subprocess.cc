#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "base/process.h"
#include "base/spawn.h"
#include "base/unique_fd.h"

namespace stagehand {
namespace {

constexpr size_t kMaxOutput = size_t{64} * 1024;

}  // namespace

std::string ArgvToString(const std::vector<std::string>& argv) {
  return absl::StrJoin(argv, " ");
}

namespace {

// Starts `argv` with stdin on /dev/null and stdout and stderr on `output`. posix_spawn, not
// fork: it does not copy the agent's page tables (a fork of the agent cost milliseconds per tool
// run on the development VM) and reports exec failures itself.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int output) {
  std::vector<char*> cargv = SpawnArgv(argv);
  SpawnActions actions;
  SpawnAttributes attributes;
  if (!actions.ok() || attributes.error() != 0) {
    return absl::ResourceExhaustedError("cannot set up posix_spawn");
  }
  // Opened here, so that a missing /dev/null cannot pass for a missing program (without it the
  // child keeps our stdin, as before).
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  int rc =
      devnull ? posix_spawn_file_actions_adddup2(actions.get(), devnull.Get(), STDIN_FILENO) : 0;
  rc = rc != 0 ? rc : posix_spawn_file_actions_adddup2(actions.get(), output, STDOUT_FILENO);
  rc = rc != 0 ? rc : posix_spawn_file_actions_adddup2(actions.get(), output, STDERR_FILENO);
  if (rc != 0) {
    return ErrnoStatus(rc, "posix_spawn setup");
  }
  pid_t pid = -1;
  rc = posix_spawnp(&pid, cargv[0], actions.get(), attributes.get(), cargv.data(), environ);
  if (rc == ENOENT) {
    return absl::NotFoundError(absl::StrCat("program '", argv[0], "' not found in PATH"));
  }
  if (rc != 0) {
    return ErrnoStatus(rc, absl::StrCat("exec '", argv[0], "'"));
  }
  return pid;
}

// Reads `pipe` into `output` (at most kMaxOutput bytes kept) until it closes or `deadline`
// passes. False when the deadline passed first.
bool ReadUntilClosed(int pipe, std::chrono::steady_clock::time_point deadline,
                     std::string& output) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return false;
    }
    pollfd pfd{pipe, POLLIN, 0};
    const int n = poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n == 0) {
      return false;
    }
    std::array<char, 4096> buf{};
    const ssize_t r = read(pipe, buf.data(), buf.size());
    if (r > 0) {
      if (output.size() < kMaxOutput) {
        output.append(buf.data(), static_cast<size_t>(r));
      }
    } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
      return true;
    }
  }
}

// Waits for the process behind `pidfd` to exit until `deadline`. False when it did not.
bool WaitUntilExited(int pidfd, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  pollfd pfd{pidfd, POLLIN, 0};
  int n = 0;
  do {
    n = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
  } while (n < 0 && errno == EINTR);
  return n != 0;
}

}  // namespace

absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const RunOptions& options) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("empty argv");
  }
  std::array<int, 2> pipe_fds{};
  if (pipe2(pipe_fds.data(), O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "pipe2");
  }
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  SH_ASSIGN_OR_RETURN(const pid_t pid, Spawn(argv, write_end.Get()));
  write_end.Reset();
  UniqueFd pidfd(PidfdOpen(pid));

  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  bool timed_out = !ReadUntilClosed(read_end.Get(), deadline, result.output);
  // The output pipe closed; the child may still be exiting. Wait with the remaining budget.
  timed_out = timed_out || (pidfd && !WaitUntilExited(pidfd.Get(), deadline));
  if (timed_out) {
    kill(pid, SIGKILL);
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("'", ArgvToString(argv), "' did not finish in ",
                                                    options.timeout.count(), " ms"));
  }
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.exit_code = 128 + WTERMSIG(wstatus);
  }
  return result;
}

}  // namespace stagehand
