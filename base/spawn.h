#pragma once

// Starting programs with posix_spawn instead of fork: a fork copies the page tables of a large,
// multi-threaded agent (milliseconds per start on the development VM, and copy-on-write faults
// afterwards); posix_spawn shares the address space until the exec and reports exec failures.

#include <spawn.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand {

// `argv` as posix_spawn wants it: pointers into the strings, then a null pointer.
std::vector<char*> SpawnArgv(const std::vector<std::string>& argv);

// posix_spawn_file_actions_t, destroyed on scope exit.
class SpawnActions {
 public:
  SpawnActions();
  ~SpawnActions();
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;

  bool ok() const { return ok_; }

  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_{};
  bool ok_ = false;
};

// posix_spawnattr_t, destroyed on scope exit. Every child starts with no signal blocked and
// SIGPIPE back at its default action (the agent ignores it).
class SpawnAttributes {
 public:
  SpawnAttributes();
  ~SpawnAttributes();
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;

  // 0 or an errno value from posix_spawnattr_* (then the object is unusable).
  int error() const { return error_; }

  // The child starts a new session (setsid).
  void NewSession();

  posix_spawnattr_t* get() { return &attributes_; }

 private:
  posix_spawnattr_t attributes_{};
  short flags_ = 0;
  int error_ = 0;
};

// Starts `argv` (argv[0] is a path) detached: through an intermediate process that exits at once,
// so the program is reparented to init, never becomes the caller's zombie and outlives it. It
// runs in a new session with `stdin_fd` and `stdout_fd` as stdin and stdout, the caller's stderr,
// and no other descriptor. Returns once the program was executed.
// InvalidArgument: empty argv. NotFound: no such program. Others: errno of the failed step.
absl::Status SpawnDetached(const std::vector<std::string>& argv, int stdin_fd, int stdout_fd);

}  // namespace stagehand
