#pragma once

// What the built-in driver's node service is configured with and works through.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "mounter/block_probe.h"
#include "mounter/mounter.h"
#include "transport/registry.h"

namespace stagehand::driver {

struct NodeServiceOptions {
  std::string node_id;
  int64_t max_volumes_per_node = 0;  // 0: unlimited.
  // Volumes use session processes and loop devices unless their context names the kernel
  // transport: NodeGetInfo counts the memory left for them (node_room.h).
  bool userspace_default = false;
  int64_t session_memory_bytes = 0;            // SessionMemoryBytes (node_room.h).
  uint32_t replacement_timeout_seconds = 120;  // Unless the volume context says otherwise.
  // Seconds a stage waits for a dead holder of its LUN's reservation before it takes it over
  // (0: never), unless the volume context says otherwise (iscsi::TargetSpec).
  uint32_t takeover_after_seconds = 30;
  std::string initiator_name;
  std::string state_dir;    // Holds volumes/ (records) and format-intents/.
  std::string runtime_dir;  // Holds sessions/<hash>/ of session processes.
};

struct NodeServiceDeps {
  // The node's transports; a volume goes to the one its context names, else the default.
  transport::Registry& transport;
  mounter::Mounter& mounter;
  mounter::BlockProbe& probe;
  // mkfs and fsck; default to mounter::Format / mounter::Check.
  std::function<absl::Status(const std::string&, std::string_view)> format;
  std::function<absl::Status(const std::string&, std::string_view)> check;
  // Grows a filesystem (device, mount path, fs type); defaults to mounter::Grow.
  std::function<absl::Status(const std::string&, const std::string&, std::string_view)> grow;
};

}  // namespace stagehand::driver
