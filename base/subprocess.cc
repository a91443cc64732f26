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

#include "base/unique_fd.h"

namespace stagehand {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;

int PidfdOpen(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

}  // namespace

std::string ArgvToString(const std::vector<std::string>& argv) {
  return absl::StrJoin(argv, " ");
}

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
  // Prepare everything the child needs before fork: only async-signal-safe calls after it.
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) {
    cargv.push_back(const_cast<char*>(a.c_str()));
  }
  cargv.push_back(nullptr);
  // Report exec failure through a close-on-exec pipe.
  std::array<int, 2> err_fds{};
  if (pipe2(err_fds.data(), O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "pipe2");
  }
  UniqueFd err_read(err_fds[0]);
  UniqueFd err_write(err_fds[1]);

  const pid_t pid = fork();
  if (pid < 0) {
    return ErrnoStatus(errno, "fork");
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
    }
    dup2(write_end.Get(), STDOUT_FILENO);
    dup2(write_end.Get(), STDERR_FILENO);
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    execvp(cargv[0], cargv.data());
    int e = errno;
    (void)!write(err_write.Get(), &e, sizeof(e));
    _exit(127);
  }
  write_end.Reset();
  err_write.Reset();
  UniqueFd pidfd(PidfdOpen(pid));

  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  bool timed_out = false;
  bool pipe_open = true;
  while (pipe_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{read_end.Get(), POLLIN, 0};
    int n = poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n == 0) {
      timed_out = true;
      break;
    }
    std::array<char, 4096> buf{};
    ssize_t r = read(read_end.Get(), buf.data(), buf.size());
    if (r > 0) {
      if (result.output.size() < kMaxOutput) {
        result.output.append(buf.data(), static_cast<size_t>(r));
      }
    } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
      pipe_open = false;
    }
  }
  if (timed_out) {
    kill(pid, SIGKILL);
  } else if (pidfd) {
    // The output pipe closed; the child may still be exiting. Wait with the remaining budget.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{pidfd.Get(), POLLIN, 0};
    int n = 0;
    do {
      n = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      timed_out = true;
      kill(pid, SIGKILL);
    }
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  int exec_errno = 0;
  if (read(err_read.Get(), &exec_errno, sizeof(exec_errno)) == sizeof(exec_errno)) {
    if (exec_errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("program '", argv[0], "' not found in PATH"));
    }
    return ErrnoStatus(exec_errno, absl::StrCat("exec '", argv[0], "'"));
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
