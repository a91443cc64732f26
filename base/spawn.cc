#include "base/spawn.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_cat.h>

namespace stagehand {
namespace {

// Stack of the intermediate process, which only calls posix_spawn (which maps its own stack
// for the program's child).
constexpr size_t kIntermediateStack = size_t{256} * 1024;

struct DetachRequest {
  int stdin_fd = -1;
  int stdout_fd = -1;
  const char* path = nullptr;
  char* const* argv = nullptr;
  posix_spawn_file_actions_t* actions = nullptr;
  posix_spawnattr_t* attributes = nullptr;
  int result = -1;  // Written by the intermediate process, which shares our memory.
};

// Runs on a stack AddressSanitizer does not know, with the caller's thread state: not
// instrumented (its no-return handling would unpoison the caller's stack).
//
// It has a copy of the caller's descriptor table (no CLONE_FILES) and keeps it until the program
// has been exec'd: first it closes every descriptor but the two the program gets, so that a
// caller killed meanwhile leaves none of its listening sockets open in here (a restarted agent
// would find its registration socket still accepting and take it for another agent's).
__attribute__((no_sanitize("address"))) void CloseAllExcept(int a, int b) {
  unsigned int first = STDERR_FILENO + 1;
  for (int keep : {a < b ? a : b, a < b ? b : a}) {
    if (keep >= static_cast<int>(first)) {
      if (keep > static_cast<int>(first)) {
        (void)close_range(first, static_cast<unsigned int>(keep) - 1, 0);
      }
      first = static_cast<unsigned int>(keep) + 1;
    }
  }
  (void)close_range(first, ~0U, 0);
}

__attribute__((no_sanitize("address"))) int Intermediate(void* arg) {
  auto* request = static_cast<DetachRequest*>(arg);
  CloseAllExcept(request->stdin_fd, request->stdout_fd);
  request->result = posix_spawn(nullptr, request->path, request->actions, request->attributes,
                                request->argv, environ);
  _exit(0);
}

}  // namespace

std::vector<char*> SpawnArgv(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) {
    cargv.push_back(const_cast<char*>(a.c_str()));
  }
  cargv.push_back(nullptr);
  return cargv;
}

SpawnActions::SpawnActions() : ok_(posix_spawn_file_actions_init(&actions_) == 0) {}

SpawnActions::~SpawnActions() {
  if (ok_) {
    posix_spawn_file_actions_destroy(&actions_);
  }
}

SpawnAttributes::SpawnAttributes() {
  error_ = posix_spawnattr_init(&attributes_);
  if (error_ != 0) {
    return;
  }
  sigset_t none;
  sigemptyset(&none);
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  flags_ = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (int e = posix_spawnattr_setsigmask(&attributes_, &none); e != 0) {
    error_ = e;
  } else if (int e2 = posix_spawnattr_setsigdefault(&attributes_, &pipe); e2 != 0) {
    error_ = e2;
  } else {
    error_ = posix_spawnattr_setflags(&attributes_, flags_);
  }
}

SpawnAttributes::~SpawnAttributes() {
  posix_spawnattr_destroy(&attributes_);
}

void SpawnAttributes::NewSession() {
  if (error_ == 0) {
    flags_ = static_cast<short>(flags_ | POSIX_SPAWN_SETSID);
    error_ = posix_spawnattr_setflags(&attributes_, flags_);
  }
}

absl::Status SpawnDetached(const std::vector<std::string>& argv, int stdin_fd, int stdout_fd) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("empty command");
  }
  std::vector<char*> cargv = SpawnArgv(argv);
  SpawnActions actions;
  SpawnAttributes attributes;
  attributes.NewSession();
  if (!actions.ok() || attributes.error() != 0) {
    return absl::ResourceExhaustedError("cannot set up posix_spawn");
  }
  int rc = posix_spawn_file_actions_adddup2(actions.get(), stdin_fd, STDIN_FILENO);
  rc = rc != 0 ? rc : posix_spawn_file_actions_adddup2(actions.get(), stdout_fd, STDOUT_FILENO);
  rc = rc != 0 ? rc : posix_spawn_file_actions_addclosefrom_np(actions.get(), STDERR_FILENO + 1);
  if (rc != 0) {
    return ErrnoStatus(rc, "posix_spawn setup");
  }
  void* stack = mmap(nullptr, kIntermediateStack, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    return ErrnoStatus(errno, "mmap a stack");
  }
  absl::Cleanup unmap = [stack] { munmap(stack, kIntermediateStack); };
  DetachRequest request;
  request.stdin_fd = stdin_fd;
  request.stdout_fd = stdout_fd;
  request.path = cargv[0];
  request.argv = cargv.data();
  request.actions = actions.get();
  request.attributes = attributes.get();
  // The intermediate shares our memory (CLONE_VM) while we wait for it (CLONE_VFORK): no signal
  // handler of ours may run on its stack.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t child = clone(&Intermediate, static_cast<char*>(stack) + kIntermediateStack,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &request);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (child < 0) {
    return ErrnoStatus(clone_errno, "clone");
  }
  int wstatus = 0;
  while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || request.result < 0) {
    return absl::InternalError(absl::StrCat("the process starting '", argv[0], "' died"));
  }
  if (request.result == ENOENT) {
    return absl::NotFoundError(absl::StrCat("program '", argv[0], "' not found"));
  }
  if (request.result != 0) {
    return ErrnoStatus(request.result, absl::StrCat("exec '", argv[0], "'"));
  }
  return absl::OkStatus();
}

}  // namespace stagehand
