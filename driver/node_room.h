#pragma once

// How many volumes this node can hold, for NodeGetInfo's max_volumes_per_node: the kubelet
// writes it into the CSINode's allocatable count (and, with the CSIDriver's
// nodeAllocatableUpdatePeriodSeconds, asks again periodically), and the scheduler places no
// more volumes of the driver on the node than that.

#include <cstdint>
#include <optional>
#include <string>

namespace stagehand::driver {

// What limits the number of volumes on this node right now.
struct NodeRoom {
  int64_t staged = 0;          // Volumes staged (or being staged) now.
  int64_t configured_max = 0;  // --max-volumes-per-node; 0: none.
  // Userspace transport only (the kernel transport needs no session process); loop devices are
  // no limit there: /dev/loop-control adds them on demand whatever the loop module's max_loop.
  // MemAvailable; nullopt when unknown.
  std::optional<int64_t> available_memory_bytes = std::nullopt;
  // What one more session process takes (locked, so never reclaimed): SessionMemoryBytes.
  int64_t session_memory_bytes = 0;
};

// What one session process locks: its code, data and preallocated I/O buffers (14.3 MiB
// measured in VmLck of a classic session serving a pod's ext4 volume), and with FUSE over
// io_uring its ring entries' buffers: 16 entries of 256 KiB for each of the kernel's queues (one
// per CPU; `cpus` is what the session's ring sizes itself by, get_nprocs_conf()).
int64_t SessionMemoryBytes(bool fuse_io_uring, unsigned cpus);

// staged + the volumes the tighter limit still allows; 0 (unlimited, as CSI reads it) when
// nothing limits the node.
int64_t MaxVolumesPerNode(const NodeRoom& room);

// Reads the room of a node whose volumes use session processes: MemAvailable from
// `proc`/meminfo (left unset when unreadable).
NodeRoom ReadUserspaceRoom(const std::string& proc, int64_t session_memory_bytes);

}  // namespace stagehand::driver
