#include "base/task_runner.h"

#include <pthread.h>

#include <optional>

namespace stagehand {

TaskRunner::TaskRunner(std::string name, std::chrono::milliseconds idle_exit)
    : name_(std::move(name)), idle_exit_(idle_exit) {}

TaskRunner::~TaskRunner() {
  std::vector<std::jthread> threads;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    queue_.clear();
    if (thread_.joinable()) {
      thread_.request_stop();
      threads.push_back(std::move(thread_));
    }
    for (auto& t : finished_) {
      threads.push_back(std::move(t));
    }
    finished_.clear();
    cv_.notify_all();
  }
  threads.clear();  // Joins; the task running finishes first.
}

void TaskRunner::Post(std::function<void()> task) {
  std::vector<std::jthread> finished;
  {
    MutexLock lock(mu_);
    finished.swap(finished_);
    if (stopping_) {
      return;
    }
    queue_.push_back(std::move(task));
    if (!thread_.joinable()) {
      thread_ = std::jthread([this](const std::stop_token& token) { Work(token); });
    }
    cv_.notify_one();
  }
  finished.clear();  // Joins a thread that left; it is on its way out.
}

bool TaskRunner::running() const {
  MutexLock lock(mu_);
  return thread_.joinable();
}

bool TaskRunner::idle() const {
  MutexLock lock(mu_);
  return queue_.empty() && !in_task_;
}

bool TaskRunner::stopping() const {
  MutexLock lock(mu_);
  return stopping_;
}

void TaskRunner::Work(const std::stop_token& token) {
  (void)pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      in_task_ = false;
      const bool got =
          cv_.wait_for(mu_, token, idle_exit_,
                       [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); });
      if (token.stop_requested() || stopping_) {
        return;
      }
      if (!got) {
        // Idle: leave, to be joined by the next Post or the destructor. A Post that comes now
        // (it waits for mu_) sees no thread and starts one.
        finished_.push_back(std::move(thread_));
        thread_ = std::jthread();
        return;
      }
      task = std::move(queue_.front());
      queue_.pop_front();
      in_task_ = true;
    }
    task();
  }
}

}  // namespace stagehand
