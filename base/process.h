#pragma once

// Identifying a process across pid reuse: a pid plus its start time (field 22 of
// /proc/<pid>/stat, clock ticks since boot) names one process for good.

#include <cstdint>

namespace stagehand {

// The start time of `pid`, or 0 if it does not exist or has exited (a zombie).
uint64_t ProcessStartTime(int pid);

// True when `pid` is alive and started at `start_time` (0 never matches).
bool IsSameProcessAlive(int pid, uint64_t start_time);

// The state of `pid` (field 3 of /proc/<pid>/stat: 'R' running, 'S' sleeping, 'D' in
// uninterruptible sleep, 'T' stopped by a signal, 't' stopped by a tracer, 'Z' zombie, ...), or
// '\0' when it does not exist. Reads only procfs: it never waits on the process.
char ProcessState(int pid);

}  // namespace stagehand
