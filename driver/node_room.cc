#include "driver/node_room.h"

#include <algorithm>

#include <absl/strings/numbers.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "base/file_io.h"

namespace stagehand::driver {

int64_t SessionMemoryBytes(bool fuse_io_uring, unsigned cpus) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  constexpr int64_t kClassic = 16 * kMiB;
  constexpr int64_t kRingPerCpu = 16 * (kMiB / 4);
  return kClassic + (fuse_io_uring ? kRingPerCpu * cpus : 0);
}

int64_t MaxVolumesPerNode(const NodeRoom& room) {
  std::optional<int64_t> more;
  auto limit = [&more](int64_t n) {
    n = std::max<int64_t>(n, 0);
    more = more ? std::min(*more, n) : n;
  };
  if (room.configured_max > 0) {
    limit(room.configured_max - room.staged);
  }
  if (room.available_memory_bytes && room.session_memory_bytes > 0) {
    limit(*room.available_memory_bytes / room.session_memory_bytes);
  }
  if (!more) {
    return 0;
  }
  // Never below what is already here, and never 0 (which would read as unlimited).
  return std::max<int64_t>(room.staged + *more, std::max<int64_t>(room.staged, 1));
}

namespace {

std::optional<int64_t> MemAvailable(const std::string& proc) {
  auto meminfo = ReadFileToString(proc + "/meminfo");
  if (!meminfo.ok()) {
    return std::nullopt;
  }
  for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) {
      continue;
    }
    absl::ConsumeSuffix(&line, "kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return kib * 1024;
    }
  }
  return std::nullopt;
}

}  // namespace

NodeRoom ReadUserspaceRoom(const std::string& proc, int64_t session_memory_bytes) {
  NodeRoom room;
  room.available_memory_bytes = MemAvailable(proc);
  room.session_memory_bytes = session_memory_bytes;
  return room;
}

}  // namespace stagehand::driver
