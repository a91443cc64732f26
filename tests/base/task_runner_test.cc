#include "base/task_runner.h"

#include <atomic>
#include <chrono>
#include <future>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stagehand {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;

TEST(TaskRunnerTest, RunsTasksOneAtATimeInOrderOffTheCallersThread) {
  TaskRunner runner("test-runner");
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::atomic<bool> on_caller{false};
  const auto caller = std::this_thread::get_id();
  std::promise<void> done;

  for (int i = 0; i < 4; ++i) {
    runner.Post([&, i] {
      overlapped = overlapped || running.fetch_add(1) != 0;
      on_caller = on_caller || std::this_thread::get_id() == caller;
      order.push_back(i);
      running.fetch_sub(1);
    });
  }
  runner.Post([&] { done.set_value(); });
  done.get_future().wait();

  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3));
  EXPECT_FALSE(overlapped);
  EXPECT_FALSE(on_caller);
}

TEST(TaskRunnerTest, TheThreadLeavesWhenIdleAndComesBackWithWork) {
  TaskRunner runner("test-runner", milliseconds(1));
  std::promise<void> first;

  EXPECT_FALSE(runner.running());
  runner.Post([&] { first.set_value(); });
  first.get_future().wait();
  while (runner.running()) {
    std::this_thread::yield();  // Leaves 1 ms after the task.
  }
  std::promise<void> second;
  runner.Post([&] { second.set_value(); });

  EXPECT_EQ(second.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
}

TEST(TaskRunnerTest, DestructionWaitsForTheRunningTaskAndDropsTheRest) {
  std::atomic<int> ran{0};
  std::promise<void> started;
  auto runner = std::make_unique<TaskRunner>("test-runner");
  TaskRunner* raw = runner.get();
  runner->Post([&] {
    started.set_value();
    while (!raw->stopping()) {
      std::this_thread::yield();  // Until the destructor began: it waits for this task.
    }
    ++ran;
  });
  runner->Post([&] { ++ran; });
  started.get_future().wait();

  runner.reset();

  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace stagehand
