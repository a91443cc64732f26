#include "base/dir_watch.h"

#include <sys/inotify.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/temp_dir.h"

namespace stagehand {
namespace {

using std::chrono::milliseconds;

// Waits for and returns everything queued within `timeout`.
std::vector<DirWatch::Event> Collect(DirWatch& watch, milliseconds timeout) {
  std::vector<DirWatch::Event> all;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (all.empty() && std::chrono::steady_clock::now() < deadline) {
    EXPECT_TRUE(watch.Wait(timeout).ok());
    for (auto events = watch.Read(); !events.empty(); events = watch.Read()) {
      all.insert(all.end(), events.begin(), events.end());
    }
  }
  return all;
}

TEST(DirWatchTest, ReportsEntriesWithTheirWatch) {
  testing::TempDir dir;
  auto watch = DirWatch::Create();
  ASSERT_TRUE(watch.ok()) << watch.status();
  auto wd = watch->Add(dir.path(), IN_CLOSE_WRITE | IN_DELETE);
  ASSERT_TRUE(wd.ok()) << wd.status();
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/a", "x", 0644).ok());
  ASSERT_TRUE(RemoveFileIfExists(dir.path() + "/a").ok());
  std::vector<DirWatch::Event> events;
  while (events.size() < 2) {
    auto more = Collect(*watch, milliseconds(10'000));
    ASSERT_FALSE(more.empty()) << "no events";
    events.insert(events.end(), more.begin(), more.end());
  }
  bool deleted = false;
  for (const auto& e : events) {
    EXPECT_EQ(e.wd, *wd);
    deleted = deleted || (e.name == "a" && (e.mask & IN_DELETE) != 0);
  }
  EXPECT_TRUE(deleted);
}

TEST(DirWatchTest, RenameHalvesShareACookie) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/from", "x", 0644).ok());
  auto watch = DirWatch::Create();
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(watch->Add(dir.path(), IN_MOVED_FROM | IN_MOVED_TO).ok());
  ASSERT_EQ(rename((dir.path() + "/from").c_str(), (dir.path() + "/to").c_str()), 0);
  ASSERT_TRUE(watch->Wait(milliseconds(10'000)).ok());
  const auto events = watch->Read();
  ASSERT_EQ(events.size(), 2u) << "one read holds both halves";
  EXPECT_EQ(events[0].name, "from");
  EXPECT_EQ(events[1].name, "to");
  EXPECT_NE(events[0].cookie, 0u);
  EXPECT_EQ(events[0].cookie, events[1].cookie);
}

TEST(DirWatchTest, AMissingPathIsNotFound) {
  auto watch = DirWatch::Create();
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ(watch->Add("/nonexistent/stagehand-test", IN_CREATE).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(DirWatchTest, WakeEndsAWaitFromAnotherThread) {
  auto watch = DirWatch::Create();
  ASSERT_TRUE(watch.ok());
  std::thread waker([&] { watch->Wake(); });
  EXPECT_TRUE(watch->Wait().ok()) << "returns although no limit was given";
  waker.join();
  EXPECT_TRUE(watch->Read().empty());
}

TEST(DirWatchTest, WaitUntilChecksFirstThenOnChanges) {
  testing::TempDir dir;
  auto watch = DirWatch::Create();
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(watch->Add(dir.path(), IN_MOVED_TO).ok());  // WriteFileAtomically renames.
  int checks = 0;
  EXPECT_TRUE(WaitUntil(*watch, std::chrono::steady_clock::now(), [&] { return ++checks > 0; }));
  EXPECT_EQ(checks, 1);

  const std::string flag = dir.path() + "/flag";
  std::thread writer([&] { ASSERT_TRUE(WriteFileAtomically(flag, "1", 0644).ok()); });
  EXPECT_TRUE(WaitUntil(*watch, std::chrono::steady_clock::now() + std::chrono::seconds(10),
                        [&] { return ReadFileToString(flag).ok(); }));
  writer.join();
  EXPECT_FALSE(
      WaitUntil(*watch, std::chrono::steady_clock::now() + milliseconds(20), [] { return false; }));
}

}  // namespace
}  // namespace stagehand
