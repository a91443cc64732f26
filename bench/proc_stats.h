#pragma once

// What /proc says about a process the benchmarks started: CPU ticks and /proc/<pid>/status
// fields.

#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace stagehand::bench {

// utime + stime, in clock ticks (sysconf(_SC_CLK_TCK)).
inline uint64_t CpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string skip;
  uint64_t utime = 0;
  uint64_t stime = 0;
  for (int i = 0; i < 11; ++i) {
    fields >> skip;
  }
  fields >> utime >> stime;
  return utime + stime;
}

// A numeric field of /proc/<pid>/status ("VmRSS", "RssAnon", "RssFile", "Threads"; the memory
// ones in KiB); -1 when missing.
inline long StatusField(pid_t pid, std::string_view name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 &&
        line[name.size()] == ':') {
      return std::stol(line.substr(name.size() + 1));
    }
  }
  return -1;
}

}  // namespace stagehand::bench
