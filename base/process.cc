#include "base/process.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "base/file_io.h"
#include "base/unique_fd.h"

namespace stagehand {

namespace {

// The fields of /proc/<pid>/stat from field 3 (state) on; empty when the process is gone or the
// file cannot be read. The command name (field 2) may contain spaces and parentheses, so the
// fields are taken after the last ')'.
std::vector<std::string> StatFieldsFromState(int pid) {
  auto stat = ReadFileToString(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) {
    return {};
  }
  const size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) {
    return {};
  }
  return absl::StrSplit(absl::string_view(*stat).substr(close + 2), ' ');
}

}  // namespace

uint64_t ProcessStartTime(int pid) {
  const std::vector<std::string> fields = StatFieldsFromState(pid);
  // fields[0] is field 3 (state); starttime is field 22.
  uint64_t start = 0;
  if (fields.size() <= 19 || !absl::SimpleAtoi(fields[19], &start)) {
    return 0;
  }
  if (fields[0] == "Z") {
    return 0;  // A zombie has exited.
  }
  return start;
}

std::optional<double> StartTimeAsUnixSeconds(uint64_t start_time) {
  // The boot time, read once: /proc/stat is long on a big host, and a value read once does not
  // move when the clock is stepped (a moved start time would look like a restart).
  static const std::optional<uint64_t> kBootTime = []() -> std::optional<uint64_t> {
    auto stat = ReadFileToString("/proc/stat");
    if (!stat.ok()) {
      return std::nullopt;
    }
    for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
      uint64_t boot = 0;
      if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtoi(line, &boot)) {
        return boot;
      }
    }
    return std::nullopt;
  }();
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  if (start_time == 0 || ticks_per_second <= 0 || !kBootTime) {
    return std::nullopt;
  }
  return static_cast<double>(*kBootTime) +
         static_cast<double>(start_time) / static_cast<double>(ticks_per_second);
}

char ProcessState(int pid) {
  const std::vector<std::string> fields = StatFieldsFromState(pid);
  return fields.empty() || fields[0].empty() ? '\0' : fields[0][0];
}

bool IsSameProcessAlive(int pid, uint64_t start_time) {
  return pid > 0 && start_time != 0 && ProcessStartTime(pid) == start_time;
}

void NeverDumpCore() {
  (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  const rlimit none{0, 0};
  (void)setrlimit(RLIMIT_CORE, &none);
}

int PidfdOpen(int pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

bool WaitForExit(int pid, std::chrono::milliseconds timeout) {
  UniqueFd pidfd(PidfdOpen(pid));
  if (!pidfd) {
    return errno == ESRCH;
  }
  pollfd pfd{pidfd.Get(), POLLIN, 0};
  int n = 0;
  do {
    n = poll(&pfd, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

void KillAndWait(int pid, uint64_t start_time, std::chrono::seconds timeout) {
  if (pid <= 0 || !IsSameProcessAlive(pid, start_time)) {
    return;
  }
  kill(pid, SIGTERM);
  if (!WaitForExit(pid, timeout)) {
    kill(pid, SIGKILL);
    (void)WaitForExit(pid, std::chrono::seconds(5));
  }
}

}  // namespace stagehand
