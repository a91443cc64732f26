#include "session/counters_file.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>

#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::session {
namespace {

class DataPathCountersTest : public ::testing::Test {
 protected:
  stagehand::testing::TempDir temp_;
  const std::string dir_ = temp_.path();
  const std::string path_ = dir_ + "/counters";
};

TEST_F(DataPathCountersTest, WhatTheSessionCountsIsWhatTheAgentReads) {
  auto file = CountersFile::Create(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  CountAdd(file->get(), &DataPathCounters::write_ops, 2);
  CountAdd(file->get(), &DataPathCounters::write_bytes, 8192);
  CountAdd(file->get(), &DataPathCounters::io_errors, 1);

  auto read = ReadCounters(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->write_ops, 2u);
  EXPECT_EQ(read->write_bytes, 8192u);
  EXPECT_EQ(read->io_errors, 1u);
  EXPECT_EQ(read->read_ops, 0u);
  // Later increments are visible to a later read without any write(2) by the session.
  CountAdd(file->get(), &DataPathCounters::read_bytes, 4096);
  EXPECT_EQ(ReadCounters(path_)->read_bytes, 4096u);
}

TEST_F(DataPathCountersTest, ANewSessionStartsFromZero) {
  {
    auto first = CountersFile::Create(path_);
    ASSERT_TRUE(first.ok());
    CountAdd(first->get(), &DataPathCounters::read_ops, 5);
  }
  auto second = CountersFile::Create(path_);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(ReadCounters(path_)->read_ops, 0u);
}

TEST_F(DataPathCountersTest, MissingAndForeignFilesAreErrors) {
  EXPECT_EQ(ReadCounters(path_).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomically(path_, "short", 0600).ok());
  EXPECT_EQ(ReadCounters(path_).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(DataPathCountersTest, TheHeartbeatTellsHowLongAgoTheLoopTurned) {
  auto file = CountersFile::Create(path_);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(SinceLastBeat(*ReadCounters(path_), MonotonicNowNs()), std::nullopt);

  Beat(file->get());
  const uint64_t beat = ReadCounters(path_)->heartbeat_ns;

  EXPECT_GT(beat, 0u);
  EXPECT_EQ(SinceLastBeat(*ReadCounters(path_), beat + 7'500'000'000U),
            std::chrono::milliseconds(7500));
  EXPECT_EQ(SinceLastBeat(*ReadCounters(path_), beat - 1), std::chrono::milliseconds(0));
}

TEST_F(DataPathCountersTest, AFileOfTheFirstLayoutReadsWithoutAHeartbeat) {
  DataPathCounters old;
  old.version = 1;
  old.read_ops = 3;
  old.heartbeat_ns = 42;  // Not part of version 1: cut off below.
  const std::string bytes(reinterpret_cast<const char*>(&old),
                          offsetof(DataPathCounters, heartbeat_ns));
  ASSERT_TRUE(WriteFileAtomically(path_, bytes, 0600).ok());

  auto read = ReadCounters(path_);

  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->read_ops, 3u);
  EXPECT_EQ(read->heartbeat_ns, 0u);
}

// A session started by the build before (it runs on after an upgrade of the agent).
TEST_F(DataPathCountersTest, AFileOfTheSecondLayoutReadsWithNothingHeldByARing) {
  DataPathCounters old;
  old.version = 2;
  old.write_ops = 5;
  old.heartbeat_ns = 42;
  old.ring_held = 9;  // Not part of version 2: cut off below.
  const std::string bytes(reinterpret_cast<const char*>(&old),
                          offsetof(DataPathCounters, ring_held));
  ASSERT_TRUE(WriteFileAtomically(path_, bytes, 0600).ok());

  auto read = ReadCounters(path_);

  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->write_ops, 5u);
  EXPECT_EQ(read->heartbeat_ns, 42u);
  EXPECT_EQ(read->ring_held, 0u);
}

TEST(CountAddTest, NullCountersAreIgnored) {
  CountAdd(nullptr, &DataPathCounters::read_ops, 1);
}

}  // namespace
}  // namespace stagehand::session
