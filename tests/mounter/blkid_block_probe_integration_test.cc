#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mounter/blkid_block_probe.h"
#include "mounter/filesystem.h"
#include "mounter/format_decision.h"
#include "tests/mounter/loop_device_fixture.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::mounter {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Kind = ProbeResult::Kind;

constexpr int64_t kMiB = int64_t{1} << 20;

// A minimal MBR: one Linux (0x83) partition from sector 2048 to the end, and the 0x55AA marker.
std::string MinimalMbr(int64_t device_bytes) {
  std::string sector(512, '\0');
  auto put_le32 = [&sector](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      sector[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
    }
  };
  constexpr size_t kEntry = 446;
  sector[kEntry + 0] = '\0';    // Not bootable.
  sector[kEntry + 4] = '\x83';  // Linux.
  put_le32(kEntry + 8, 2048);
  put_le32(kEntry + 12, static_cast<uint32_t>(device_bytes / 512 - 2048));
  sector[510] = '\x55';
  sector[511] = '\xaa';
  return sector;
}

class BlkidBlockProbeTest : public LoopDeviceTest {
 protected:
  BlkidBlockProbe probe_;
};

TEST_F(BlkidBlockProbeTest, FreshDeviceIsBlank) {
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());

  absl::StatusOr<ProbeResult> r = probe_.Probe(*loop);

  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->kind, Kind::kBlank);
  EXPECT_THAT(r->type, IsEmpty());
  EXPECT_THAT(DecideFormat(*r, "ext4"), IsOk());
}

TEST_F(BlkidBlockProbeTest, DataWithoutSignatureIsNotZeroed) {
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());
  std::mt19937 rng(42);
  std::string noise(4096, '\0');
  for (char& c : noise) {
    c = static_cast<char>(rng() & 0xff);
  }
  ASSERT_THAT(WriteAt(*loop, 4096, noise), IsOk());

  absl::StatusOr<ProbeResult> r = probe_.Probe(*loop);

  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->kind, Kind::kNotZeroed);
  EXPECT_THAT(DecideFormat(*r, "ext4"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("non-zero")));
}

TEST_F(BlkidBlockProbeTest, SmallBlankFileIsBlank) {
  // Smaller than the 2 MiB window and not a multiple of the sector size.
  absl::StatusOr<std::string> file = MakeFile("small.img");
  ASSERT_THAT(file, IsOk());
  ASSERT_THAT(WriteAt(*file, 0, std::string(100000, '\0')), IsOk());

  absl::StatusOr<ProbeResult> r = probe_.Probe(*file);

  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->kind, Kind::kBlank);
}

TEST_F(BlkidBlockProbeTest, Ext4IsFoundAndNeverReformatted) {
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());
  ASSERT_THAT(Format(*loop, "ext4"), IsOk());

  absl::StatusOr<ProbeResult> r = probe_.Probe(*loop);

  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->kind, Kind::kFilesystem);
  EXPECT_EQ(r->type, "ext4");
  EXPECT_THAT(r->uuid, Not(IsEmpty()));
  EXPECT_THAT(DecideFormat(*r, "ext4"), IsOk());
  EXPECT_EQ(DecideFormat(*r, "ext4").value(), FormatAction::kUseExisting);
  EXPECT_THAT(DecideFormat(*r, "xfs"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ext4")));
  // The second safety net: mkfs.xfs without -f refuses to overwrite the ext4 superblock.
  EXPECT_THAT(Format(*loop, "xfs"), StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(probe_.Probe(*loop).value().type, "ext4");
}

TEST_F(BlkidBlockProbeTest, MbrIsAPartitionTable) {
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());
  ASSERT_THAT(WriteAt(*loop, 0, MinimalMbr(64 * kMiB)), IsOk());

  absl::StatusOr<ProbeResult> r = probe_.Probe(*loop);

  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->kind, Kind::kPartitionTable);
  EXPECT_EQ(r->type, "dos");
  EXPECT_THAT(DecideFormat(*r, "ext4"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("dos partition table")));
}

TEST_F(BlkidBlockProbeTest, MissingDeviceIsNotFound) {
  EXPECT_THAT(probe_.Probe(PathFor("no-such-device")), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(BlkidBlockProbeTest, DirectoryIsInvalid) {
  EXPECT_THAT(probe_.Probe(ScratchDir()), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace stagehand::mounter
