#pragma once

// A serial queue for blocking work (gRPC calls to plugins, rounds over volumes) whose thread
// exists only while there is work: it starts with a task and leaves after `idle_exit` without
// one, so that an agent at rest holds none. Tasks run one at a time, in the order posted.
//
// Thread-safe. Tasks that must be abandoned early (a plugin socket removed) check a stop token of
// their own; the runner cannot interrupt one.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace stagehand {

class TaskRunner {
 public:
  // `name` names the thread (the first 15 bytes: ps, top, /proc/<pid>/task/*/comm).
  explicit TaskRunner(std::string name,
                      std::chrono::milliseconds idle_exit = std::chrono::seconds(1));
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;
  // Drops the tasks not started, waits for the one running and joins the thread.
  // REQUIRES: not called from a task of this runner.
  ~TaskRunner();

  // Queues `task`; ignored once the destructor began.
  void Post(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the thread exists now (for tests and footprint figures).
  bool running() const ABSL_LOCKS_EXCLUDED(mu_);
  // No task queued or running.
  bool idle() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the destructor began (tasks that loop may ask).
  bool stopping() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Work(const std::stop_token& token) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string name_;
  const std::chrono::milliseconds idle_exit_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool in_task_ ABSL_GUARDED_BY(mu_) = false;
  std::jthread thread_ ABSL_GUARDED_BY(mu_);
  // A thread that left when idle; joined by the next Post or the destructor (outside mu_).
  std::vector<std::jthread> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand
