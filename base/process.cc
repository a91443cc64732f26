#include "base/process.h"

#include <string>
#include <vector>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"

namespace stagehand {

uint64_t ProcessStartTime(int pid) {
  auto stat = ReadFileToString(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) {
    return 0;
  }
  // The command name (field 2) may contain spaces; fields after it follow the last ')'.
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) {
    return 0;
  }
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*stat).substr(close + 2), ' ');
  // fields[0] is field 3 (state); starttime is field 22.
  uint64_t start = 0;
  if (fields.size() <= 19 || !absl::SimpleAtoi(fields[19], &start)) {
    return 0;
  }
  if (!fields.empty() && fields[0] == "Z") {
    return 0;  // A zombie has exited.
  }
  return start;
}

char ProcessState(int pid) {
  auto stat = ReadFileToString(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) {
    return '\0';
  }
  const size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) {
    return '\0';
  }
  return (*stat)[close + 2];
}

bool IsSameProcessAlive(int pid, uint64_t start_time) {
  return pid > 0 && start_time != 0 && ProcessStartTime(pid) == start_time;
}

}  // namespace stagehand
