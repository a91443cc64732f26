#pragma once

// Identifying a process across pid reuse: a pid plus its start time (field 22 of
// /proc/<pid>/stat, clock ticks since boot) names one process for good.

#include <chrono>
#include <cstdint>
#include <optional>

namespace stagehand {

// The start time of `pid`, or 0 if it does not exist or has exited (a zombie).
uint64_t ProcessStartTime(int pid);

// A start time (clock ticks since boot, as ProcessStartTime gives it) as seconds since the Unix
// epoch, through the boot time in /proc/stat; nullopt when that cannot be read or `start_time`
// is 0. What Prometheus' process_start_time_seconds convention wants.
std::optional<double> StartTimeAsUnixSeconds(uint64_t start_time);

// True when `pid` is alive and started at `start_time` (0 never matches).
bool IsSameProcessAlive(int pid, uint64_t start_time);

// The state of `pid` (field 3 of /proc/<pid>/stat: 'R' running, 'S' sleeping, 'D' in
// uninterruptible sleep, 'T' stopped by a signal, 't' stopped by a tracer, 'Z' zombie, ...), or
// '\0' when it does not exist. Reads only procfs: it never waits on the process.
char ProcessState(int pid);

// For processes that hold secrets (CHAP passwords): no core dump of this process, ever, nor of
// what it starts before that sets its own (PR_SET_DUMPABLE 0 and a core size limit of 0, hard).
// A crash then leaves no copy of its memory in a file, wherever the core pattern points.
// Call first thing in main().
void NeverDumpCore();

// A pidfd of `pid` (pidfd_open), or -1 with errno set (ESRCH: no such process).
int PidfdOpen(int pid);

// Waits up to `timeout` for `pid` to exit. True if it did (or never existed).
bool WaitForExit(int pid, std::chrono::milliseconds timeout);

// SIGTERM to the process `pid` started at `start_time` (nothing when it is not alive), then
// SIGKILL if it has not exited after `timeout`; returns once it is gone (at most 5 s more).
void KillAndWait(int pid, uint64_t start_time, std::chrono::seconds timeout);

}  // namespace stagehand
