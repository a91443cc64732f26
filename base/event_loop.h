#pragma once

// One thread's loop over file descriptors, timers and posted tasks (epoll and an eventfd): where
// the agent's watchers (manifests, plugin sockets), timers and the reconciler's planning run, so
// that an agent at rest holds one thread for all of them instead of one each.
//
// Run() makes the calling thread the loop thread until Stop(). Everything else is thread-safe.
// Tasks and fd callbacks run on the loop thread, one at a time, in no lock of the loop: they may
// call back into the loop. They must not block for long: blocking calls (gRPC to a plugin, file
// system rounds) belong on a TaskRunner (task_runner.h), which may post the result back.
//
// The loop's own Cancel and Unwatch never wait. A component that must know its callback is over
// before it goes away (the usual case) holds a LoopTimer or LoopWatch, below.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "base/mutex.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand {

class EventLoop {
 public:
  using Task = std::function<void()>;
  using TimePoint = std::chrono::steady_clock::time_point;
  using TimerId = uint64_t;

  static absl::StatusOr<std::unique_ptr<EventLoop>> Create();

  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  // Drops the timers and watches left. REQUIRES: Run() has returned (or never ran).
  ~EventLoop();

  // Runs tasks, timers and fd callbacks until Stop(). An error only when epoll itself fails.
  // REQUIRES: not running on another thread.
  absl::Status Run();
  // Makes Run() return once the callback in progress (if any) is done; what is still due stays
  // queued for a later Run(). Safe from any thread; before Run(), that Run() returns at once.
  void Stop();

  // Runs `task` on the loop thread at `when` (at once when it is past), after the tasks due
  // before it. The id is never 0.
  TimerId RunAt(TimePoint when, Task task);
  TimerId RunAfter(std::chrono::milliseconds delay, Task task);

  void Post(Task task) { RunAfter(std::chrono::milliseconds(0), std::move(task)); }

  // Removes a timer that has not started: true if it was removed, false if it ran, is running
  // or is unknown. Never waits.
  bool Cancel(TimerId id);

  // Calls `on_readable` on the loop thread whenever `fd` is readable (level-triggered: the
  // callback reads what is there). `fd` stays owned by the caller and must stay open until
  // Unwatch. InvalidArgument for an fd already watched; errno-based codes from epoll_ctl.
  absl::Status Watch(int fd, Task on_readable);
  // Stops calling back for `fd`. A callback already running finishes; never waits.
  void Unwatch(int fd);

  // True on the thread inside Run().
  bool InLoopThread() const;

 private:
  struct Timer {
    TimerId id;
    Task task;
  };

  EventLoop(UniqueFd epoll, UniqueFd wake) : epoll_(std::move(epoll)), wake_(std::move(wake)) {}

  void Wake() const;
  // Milliseconds until the first timer for epoll_wait (-1: none).
  int NextTimeoutMs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunDueTimers() ABSL_LOCKS_EXCLUDED(mu_);
  void Dispatch(int fd) ABSL_LOCKS_EXCLUDED(mu_);

  const UniqueFd epoll_;
  const UniqueFd wake_;  // eventfd: a new earlier timer, a watch change, Stop.

  mutable Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id loop_thread_ ABSL_GUARDED_BY(mu_);
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Ordered by due time, then id (the order they were added in for the same time).
  std::map<std::pair<TimePoint, TimerId>, Task> timers_ ABSL_GUARDED_BY(mu_);
  std::map<TimerId, TimePoint> due_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::shared_ptr<Task>> watches_ ABSL_GUARDED_BY(mu_);
};

// What LoopTimer and LoopWatch share: callbacks that stop at a Close() which waits for the one
// running (unless it is called from that callback).
class CallbackGate {
 public:
  CallbackGate() = default;
  ~CallbackGate() = default;
  CallbackGate(const CallbackGate&) = delete;
  CallbackGate& operator=(const CallbackGate&) = delete;

  // Runs `callback` unless closed. Returns false when closed.
  bool Enter(const std::function<void()>& callback) ABSL_LOCKS_EXCLUDED(mu_);
  // After it returns no callback is running (but one running on this very thread) and none
  // starts again.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  bool closed() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::condition_variable_any idle_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread::id running_on_ ABSL_GUARDED_BY(mu_);
};

// A component's one-shot timer on a loop: at most one due time at once, the earliest asked for.
// Thread-safe. After Close() (or the destructor) returns, `fire` is not running (unless Close
// was called from `fire` itself) and never runs again. `loop` must outlive it.
class LoopTimer {
 public:
  LoopTimer(EventLoop& loop, std::function<void()> fire);
  LoopTimer(const LoopTimer&) = delete;
  LoopTimer& operator=(const LoopTimer&) = delete;

  ~LoopTimer() { Close(); }

  // Fires at `when`, or earlier if it is due earlier already.
  void ScheduleAt(EventLoop::TimePoint when);

  void ScheduleAfter(std::chrono::milliseconds delay) {
    ScheduleAt(std::chrono::steady_clock::now() + delay);
  }

  // Fires as soon as the loop gets to it.
  void ScheduleNow() { ScheduleAt(EventLoop::TimePoint::min()); }

  void Close();

 private:
  // Shared with the loop's task, which may outlive this object by the time it takes to find the
  // gate closed.
  struct State {
    std::function<void()> fire;
    CallbackGate gate;
    Mutex mu;
    bool pending ABSL_GUARDED_BY(mu) = false;
    EventLoop::TimePoint pending_at ABSL_GUARDED_BY(mu);
    EventLoop::TimerId pending_id ABSL_GUARDED_BY(mu) = 0;
    uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // Of the pending timer; older ones do nothing.
  };

  static void Fire(const std::shared_ptr<State>& state, uint64_t generation);

  EventLoop& loop_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

// A component's watch of an fd on a loop. Thread-safe. After Close() (or the destructor)
// returns, `on_readable` is not running (unless Close was called from it) and never runs again.
// `loop` must outlive it; `fd` must stay open until Close.
class LoopWatch {
 public:
  // Starts watching. Errors as EventLoop::Watch.
  static absl::StatusOr<std::unique_ptr<LoopWatch>> Start(EventLoop& loop, int fd,
                                                          std::function<void()> on_readable);
  LoopWatch(const LoopWatch&) = delete;
  LoopWatch& operator=(const LoopWatch&) = delete;

  ~LoopWatch() { Close(); }

  void Close();

 private:
  LoopWatch(EventLoop& loop, int fd) : loop_(loop), fd_(fd) {}

  EventLoop& loop_;
  const int fd_;
  // Shared with the loop's callback, which may outlive this object by the time it takes to
  // find the gate closed.
  std::shared_ptr<CallbackGate> gate_ = std::make_shared<CallbackGate>();
  bool watching_ = false;
};

// An EventLoop running on a thread of its own (tests; components used without the agent's loop).
class LoopThread {
 public:
  // Starts the thread. Aborts the process when epoll cannot be set up (no descriptors left):
  // nothing could work then.
  LoopThread();
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;
  // Stops the loop and joins the thread.
  ~LoopThread();

  EventLoop& loop() { return *loop_; }

 private:
  std::unique_ptr<EventLoop> loop_;
  std::jthread thread_;
};

}  // namespace stagehand
