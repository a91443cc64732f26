#include "driver/node_room.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace stagehand::driver {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(NodeRoomTest, NothingLimitsTheNodeReadsAsUnlimited) {
  EXPECT_EQ(MaxVolumesPerNode(NodeRoom{.staged = 7}), 0);
}

TEST(NodeRoomTest, StagedPlusWhatTheTightestLimitAllows) {
  NodeRoom room{.staged = 3, .configured_max = 10};
  EXPECT_EQ(MaxVolumesPerNode(room), 10);
  room.available_memory_bytes = 200 * kMiB;
  room.session_memory_bytes = 64 * kMiB;
  EXPECT_EQ(MaxVolumesPerNode(room), 6) << "3 staged + 3 sessions' worth of memory";
}

TEST(NodeRoomTest, AnExceededLimitStillWinsOverALooserOne) {
  NodeRoom room{.staged = 5, .configured_max = 4};
  room.available_memory_bytes = 1024 * kMiB;
  room.session_memory_bytes = 16 * kMiB;
  EXPECT_EQ(MaxVolumesPerNode(room), 5) << "no room left by the configured maximum";
}

TEST(NodeRoomTest, AFullNodeReportsWhatItHasAndNeverZero) {
  EXPECT_EQ(MaxVolumesPerNode(NodeRoom{.staged = 5, .configured_max = 4}), 5);
  EXPECT_EQ(MaxVolumesPerNode(NodeRoom{
                .staged = 0, .available_memory_bytes = 0, .session_memory_bytes = 64 * kMiB}),
            1)
      << "0 would read as unlimited";
}

void Write(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << content;
}

TEST(NodeRoomTest, ASessionWithFuseOverIoUringLocksItsRingBuffersPerCpu) {
  EXPECT_EQ(SessionMemoryBytes(false, 64), 16 * kMiB);
  EXPECT_EQ(SessionMemoryBytes(true, 2), 16 * kMiB + 8 * kMiB);
}

TEST(NodeRoomTest, ReadsMemAvailable) {
  testing::TempDir dir;
  Write(dir.path() + "/meminfo",
        "MemTotal:       24000000 kB\nMemFree:         1000000 kB\n"
        "MemAvailable:    2097152 kB\n");

  const NodeRoom room = ReadUserspaceRoom(dir.path(), 16 * kMiB);

  EXPECT_EQ(room.available_memory_bytes, int64_t{2097152} * 1024);
  EXPECT_EQ(room.session_memory_bytes, 16 * kMiB);
  EXPECT_EQ(MaxVolumesPerNode(room), 128);
}

TEST(NodeRoomTest, NoMeminfoLeavesTheMemoryLimitUnset) {
  testing::TempDir dir;
  const NodeRoom room = ReadUserspaceRoom(dir.path() + "/none", 16 * kMiB);
  EXPECT_FALSE(room.available_memory_bytes.has_value());
  EXPECT_EQ(MaxVolumesPerNode(room), 0);
}

}  // namespace
}  // namespace stagehand::driver
