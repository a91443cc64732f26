#include "session/protocol.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/unique_fd.h"

namespace stagehand::session {

static_assert(sizeof(DataPathCounters) % sizeof(uint64_t) == 0);

std::string RuntimePath(std::string_view runtime_dir, std::string_view name) {
  return JoinPath(std::string(runtime_dir), std::string(name));
}

absl::StatusOr<state::v1::SessionStatus> ReadStatus(std::string_view runtime_dir) {
  const std::string path = RuntimePath(runtime_dir, kStatusFile);
  SH_ASSIGN_OR_RETURN(std::string raw, ReadFileToString(path));
  state::v1::SessionStatus status;
  if (!status.ParseFromString(raw)) {
    return absl::DataLossError(absl::StrCat("unreadable session status '", path, "'"));
  }
  return status;
}

std::string FrameReadyMessage(std::string_view serialized_status) {
  const auto n = static_cast<uint32_t>(serialized_status.size());
  std::string out;
  out.reserve(4 + serialized_status.size());
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  }
  out.append(serialized_status);
  return out;
}

std::optional<std::string> UnframeReadyMessage(std::string_view buffer) {
  if (buffer.size() < 4) {
    return std::nullopt;
  }
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) {
    n |= static_cast<uint32_t>(static_cast<unsigned char>(buffer[i])) << (8 * i);
  }
  if (buffer.size() - 4 < n) {
    return std::nullopt;
  }
  return std::string(buffer.substr(4, n));
}

uint64_t MonotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000U + static_cast<uint64_t>(ts.tv_nsec);
}

std::optional<std::chrono::milliseconds> SinceLastBeat(const DataPathCounters& counters,
                                                       uint64_t now_ns) {
  if (counters.heartbeat_ns == 0) {
    return std::nullopt;
  }
  const uint64_t ago = now_ns > counters.heartbeat_ns ? now_ns - counters.heartbeat_ns : 0;
  return std::chrono::milliseconds(ago / 1'000'000U);
}

absl::StatusOr<DataPathCounters> ReadCounters(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  DataPathCounters counters;
  const ssize_t n = pread(fd.Get(), &counters, sizeof(counters), 0);
  if (n < 0) {
    return ErrnoStatus(errno, absl::StrCat("read '", path, "'"));
  }
  // Version 1 ended before the heartbeat, version 2 before ring_held.
  constexpr size_t kVersion1Size = offsetof(DataPathCounters, heartbeat_ns);
  constexpr size_t kVersion2Size = offsetof(DataPathCounters, ring_held);
  const auto size = static_cast<size_t>(n);
  const bool whole = size >= kVersion1Size && ((counters.version == 1 && size == kVersion1Size) ||
                                               (counters.version == 2 && size == kVersion2Size) ||
                                               (counters.version == 3 && size == sizeof(counters)));
  if (!whole) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a counters file of this version"));
  }
  if (counters.version == 1) {
    counters.heartbeat_ns = 0;
  }
  if (counters.version < 3) {
    counters.ring_held = 0;
  }
  return counters;
}

uint64_t LostRingRequests(const state::v1::SessionStatus& last,
                          const absl::StatusOr<DataPathCounters>& counters) {
  uint64_t lost = last.lost_ring_requests();
  if (last.fuse_mode() == "io_uring" && counters.ok()) {
    lost += counters->ring_held;
  }
  return lost;
}

}  // namespace stagehand::session
