#include "base/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/unique_fd.h"

namespace stagehand {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;

// Runs `task` on the loop and waits for it.
void OnLoop(EventLoop& loop, const std::function<void()>& task) {
  std::promise<void> done;
  loop.Post([&] {
    task();
    done.set_value();
  });
  done.get_future().wait();
}

TEST(EventLoopTest, PostedTasksRunInOrderOnTheLoopThread) {
  LoopThread thread;
  std::vector<int> order;
  bool on_loop = true;

  for (int i = 0; i < 5; ++i) {
    thread.loop().Post([&, i] {
      order.push_back(i);
      on_loop = on_loop && thread.loop().InLoopThread();
    });
  }
  OnLoop(thread.loop(), [] {});

  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_TRUE(on_loop);
  EXPECT_FALSE(thread.loop().InLoopThread());
}

TEST(EventLoopTest, TimersRunByDueTimeNotByTheOrderTheyWereAdded) {
  LoopThread thread;
  std::vector<std::string> order;
  std::promise<void> done;
  const auto now = std::chrono::steady_clock::now();

  thread.loop().RunAt(now + milliseconds(30), [&] {
    order.emplace_back("late");
    done.set_value();
  });
  thread.loop().RunAt(now + milliseconds(10), [&] { order.emplace_back("early"); });
  done.get_future().wait();

  EXPECT_THAT(order, ElementsAre("early", "late"));
}

TEST(EventLoopTest, ACancelledTimerNeverRuns) {
  LoopThread thread;
  std::atomic<bool> ran{false};

  const auto id = thread.loop().RunAfter(milliseconds(20), [&] { ran = true; });
  const bool cancelled = thread.loop().Cancel(id);
  std::promise<void> later;
  thread.loop().RunAfter(milliseconds(40), [&] { later.set_value(); });
  later.get_future().wait();

  EXPECT_TRUE(cancelled);
  EXPECT_FALSE(ran);
  EXPECT_FALSE(thread.loop().Cancel(id));
}

TEST(EventLoopTest, AWatchedFdCallsBackUntilUnwatched) {
  LoopThread thread;
  UniqueFd fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  ASSERT_TRUE(fd);
  std::atomic<int> reads{0};
  std::promise<void> first;

  ASSERT_TRUE(thread.loop()
                  .Watch(fd.Get(),
                         [&] {
                           uint64_t n = 0;
                           (void)!read(fd.Get(), &n, sizeof(n));
                           if (reads.fetch_add(1) == 0) {
                             first.set_value();
                           }
                         })
                  .ok());
  const uint64_t one = 1;
  ASSERT_EQ(write(fd.Get(), &one, sizeof(one)), 8);
  first.get_future().wait();
  OnLoop(thread.loop(), [&] { thread.loop().Unwatch(fd.Get()); });
  ASSERT_EQ(write(fd.Get(), &one, sizeof(one)), 8);
  OnLoop(thread.loop(), [] {});

  EXPECT_EQ(reads.load(), 1);
  EXPECT_FALSE(thread.loop().Watch(-1, [] {}).ok());
}

TEST(EventLoopTest, RunReturnsAfterStopAndKeepsWhatIsStillDue) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok()) << loop.status();
  int ran = 0;

  (*loop)->Post([&] {
    ++ran;
    (*loop)->Stop();
  });
  (*loop)->Post([&] { ++ran; });
  ASSERT_TRUE((*loop)->Run().ok());
  const int after_first_run = ran;
  (*loop)->Post([&] { (*loop)->Stop(); });
  ASSERT_TRUE((*loop)->Run().ok());

  EXPECT_EQ(after_first_run, 1);
  EXPECT_EQ(ran, 2);
}

TEST(LoopTimerTest, KeepsTheEarliestDueTimeAndFiresOnce) {
  LoopThread thread;
  std::atomic<int> fired{0};
  LoopTimer timer(thread.loop(), [&] { ++fired; });

  timer.ScheduleAfter(milliseconds(10'000));
  timer.ScheduleNow();
  timer.ScheduleAfter(milliseconds(10'000));  // Later than the pending one: kept as it is.
  std::promise<void> later;
  thread.loop().RunAfter(milliseconds(30), [&] { later.set_value(); });
  later.get_future().wait();

  EXPECT_EQ(fired.load(), 1);
}

TEST(LoopTimerTest, CloseWaitsForAFireInProgressAndNothingFiresAfterIt) {
  LoopThread thread;
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> finished{false};
  std::atomic<int> fired{0};
  auto timer = std::make_unique<LoopTimer>(thread.loop(), [&] {
    if (fired.fetch_add(1) == 0) {
      entered.set_value();
      released.wait();
      finished = true;
    }
  });

  timer->ScheduleNow();
  entered.get_future().wait();
  auto closing = std::async(std::launch::async, [&] { timer->Close(); });
  const bool closed_early =
      closing.wait_for(milliseconds(50)) == std::future_status::ready;  // It must wait.
  release.set_value();
  closing.wait();
  const bool finished_before_close_returned = finished.load();
  timer->ScheduleNow();  // Closed: ignored.
  OnLoop(thread.loop(), [] {});

  EXPECT_FALSE(closed_early);
  EXPECT_TRUE(finished_before_close_returned);
  EXPECT_EQ(fired.load(), 1);
}

TEST(LoopTimerTest, MayBeClosedAndRescheduledFromItsOwnCallback) {
  LoopThread thread;
  std::atomic<int> fired{0};
  std::promise<void> done;
  std::unique_ptr<LoopTimer> timer;
  timer = std::make_unique<LoopTimer>(thread.loop(), [&] {
    if (++fired < 3) {
      timer->ScheduleNow();
      return;
    }
    timer->Close();
    done.set_value();
  });

  timer->ScheduleNow();
  done.get_future().wait();
  timer.reset();

  EXPECT_EQ(fired.load(), 3);
}

TEST(LoopWatchTest, NothingIsCalledAfterClose) {
  LoopThread thread;
  UniqueFd fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  ASSERT_TRUE(fd);
  std::atomic<int> calls{0};
  auto watch = LoopWatch::Start(thread.loop(), fd.Get(), [&] {
    uint64_t n = 0;
    (void)!read(fd.Get(), &n, sizeof(n));
    ++calls;
  });
  ASSERT_TRUE(watch.ok()) << watch.status();

  (*watch)->Close();
  const uint64_t one = 1;
  ASSERT_EQ(write(fd.Get(), &one, sizeof(one)), 8);
  OnLoop(thread.loop(), [] {});

  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace stagehand
