#include "driver/volume_store.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "driver/csi_validation.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::driver {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;

class VolumeStoreTest : public ::testing::Test {
 protected:
  stagehand::testing::TempDir temp_;
  const std::string dir_ = temp_.path() + "/volumes";
};

TEST_F(VolumeStoreTest, SavesLoadsListsAndRemoves) {
  VolumeStore store(dir_);
  StagedVolume v;
  v.volume_id = "pvc-1/with:odd chars";
  v.staging_path = "/var/lib/stagehand/staging/pvc-1";
  v.phase = StagedVolume::Phase::kStaged;

  ASSERT_THAT(store.Save(v), IsOk());
  auto loaded = store.Load("pvc-1/with:odd chars");

  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->phase, StagedVolume::Phase::kStaged);
  EXPECT_EQ(store.List().size(), 1u);
  struct stat st = {};
  ASSERT_EQ(stat(store.PathFor(v.volume_id).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "records may hold volume context: owner-only";
  EXPECT_THAT(store.Remove(v.volume_id), IsOk());
  EXPECT_THAT(store.Remove(v.volume_id), IsOk());
  auto gone = store.Load(v.volume_id);
  ASSERT_THAT(gone, IsOk());
  EXPECT_FALSE(gone->has_value());
}

TEST_F(VolumeStoreTest, EveryFieldSurvivesTheRecord) {
  using Mode = csi::v1::VolumeCapability::AccessMode;
  VolumeStore store(dir_);
  StagedVolume v;
  v.volume_id = "v1";
  v.staging_path = "/s/v1";
  v.phase = StagedVolume::Phase::kUnstaging;
  v.capability = {.block = false,
                  .fs_type = "xfs",
                  .mount_flags = {"noatime", "nodev"},
                  .access_mode = Mode::MULTI_NODE_READER_ONLY,
                  .read_only_mode = true};
  v.volume_context = {{"iqn", "iqn.2026-11.dev.stagehand:t"}, {"lun", "3"}};
  v.portals = {{"10.0.0.1", 3260}, {"fd00::1", 3261}};
  v.iqn = "iqn.2026-11.dev.stagehand:t";
  v.lun = 3;
  v.identity = {{"naa.6001405abcdef"}, "serial-1", "LIO-ORG", "disk"};
  v.capacity_bytes = 1 << 30;
  v.formatted_by_us = true;
  v.publications = {{.target_path = "/p/1", .readonly = true, .mount_flags = {"noatime"}},
                    {.target_path = "/p/2", .readonly = false, .mount_flags = {}}};
  v.session.mutable_userspace()->set_pid(42);
  v.session.mutable_userspace()->set_loop_device("/dev/loop7");

  ASSERT_THAT(store.Save(v), IsOk());
  auto loaded = store.Load("v1");

  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  const StagedVolume& got = **loaded;
  EXPECT_EQ(got.volume_id, v.volume_id);
  EXPECT_EQ(got.staging_path, v.staging_path);
  EXPECT_EQ(got.phase, v.phase);
  EXPECT_EQ(got.capability, v.capability);
  EXPECT_EQ(got.volume_context, v.volume_context);
  EXPECT_EQ(got.portals, v.portals);
  EXPECT_EQ(got.iqn, v.iqn);
  EXPECT_EQ(got.lun, v.lun);
  EXPECT_EQ(got.identity, v.identity);
  EXPECT_EQ(got.capacity_bytes, v.capacity_bytes);
  EXPECT_TRUE(got.formatted_by_us);
  ASSERT_EQ(got.publications.size(), 2u);
  EXPECT_EQ(got.publications[0].target_path, "/p/1");
  EXPECT_TRUE(got.publications[0].readonly);
  EXPECT_EQ(got.publications[0].mount_flags, std::vector<std::string>{"noatime"});
  EXPECT_EQ(got.publications[1].target_path, "/p/2");
  EXPECT_EQ(got.session.userspace().pid(), 42);
  EXPECT_EQ(got.Device(), "/dev/loop7");
  // Enums by name, never by ordinal.
  auto text = ReadFileToString(store.PathFor("v1"));
  ASSERT_THAT(text, IsOk());
  EXPECT_THAT(*text, HasSubstr(R"("phase": "UNSTAGING")"));
  EXPECT_THAT(*text, HasSubstr(R"("access_mode": "MULTI_NODE_READER_ONLY")"));
}

// A record as earlier versions wrote it (the identity also inside the session record, where the
// kernel transport keeps what its disks must report; both transports' fields in one flat session
// record) reads as it did, its session as the kernel kind.
TEST_F(VolumeStoreTest, ReadsTheRecordsEarlierVersionsWrote) {
  VolumeStore store(dir_);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());
  ASSERT_THAT(WriteFileAtomically(store.PathFor("pvc-9"), R"({
 "volume_id": "pvc-9", "staging_path": "/s/9", "block": true,
 "portals": [{"host": "127.0.0.1", "port": 3260}], "iqn": "iqn.2026-11.dev.stagehand:t", "lun": 1,
 "identity": {"designators": ["naa.60000000000000000e00000000010001"], "serial": "beaf11"},
 "session": {"transport": "kernel", "paths": [{"portal": {"host": "127.0.0.1", "port": 3260},
   "iqn": "iqn.2026-11.dev.stagehand:t", "lun": 1, "disk": "sdb"}], "device": "/dev/sdb",
   "identity": {"designators": ["naa.60000000000000000e00000000010001"], "serial": "beaf11"}},
 "phase": "STAGED", "volume_context": {"lun": "1"}, "capacity_bytes": "67108864",
 "publishes": [{"target_path": "/p/9", "readonly": false}], "access_mode": "SINGLE_NODE_WRITER"
})",
                                  0600),
              IsOk());

  auto loaded = store.Load("pvc-9");

  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  const StagedVolume& v = **loaded;
  EXPECT_EQ(v.phase, StagedVolume::Phase::kStaged);
  EXPECT_TRUE(v.capability.block);
  EXPECT_EQ(v.capability.access_mode, csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  EXPECT_FALSE(v.capability.read_only_mode);
  EXPECT_EQ(v.portals, (std::vector<iscsi::Portal>{{"127.0.0.1", 3260}}));
  EXPECT_EQ(v.identity.serial, "beaf11");
  EXPECT_EQ(v.Device(), "/dev/sdb");
  EXPECT_EQ(v.session.kernel().identity().serial(), "beaf11") << "the transport's own copy is kept";
  EXPECT_EQ(v.session.kernel().paths(0).disk(), "sdb");
  EXPECT_EQ(v.session.transport(), "") << "the flat fields are cleared";
  EXPECT_EQ(v.capacity_bytes, 67108864u);
  ASSERT_EQ(v.publications.size(), 1u);
  EXPECT_EQ(v.publications[0].target_path, "/p/9");
}

// A userspace session as earlier versions recorded it (flat fields, no transport named) reads as
// the userspace kind, so that unstage finds its process, keeper and loop device.
TEST_F(VolumeStoreTest, ReadsTheUserspaceSessionsEarlierVersionsWrote) {
  VolumeStore store(dir_);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());
  ASSERT_THAT(WriteFileAtomically(store.PathFor("pvc-8"), R"({
 "volume_id": "pvc-8", "staging_path": "/s/8", "fs_type": "ext4",
 "portals": [{"host": "127.0.0.1", "port": 3260}], "iqn": "iqn.2026-11.dev.stagehand:t", "lun": 2,
 "session": {"pid": 4242, "start_time": "77", "runtime_dir": "/run/stagehand/sessions/ab",
   "fuse_mount": "/run/stagehand/sessions/ab/mnt", "lun_file": "/run/stagehand/sessions/ab/mnt/lun",
   "loop_device": "/dev/loop4", "keeper_pid": 4241, "keeper_start_time": "76", "generation": 2},
 "phase": "STAGED"
})",
                                  0600),
              IsOk());

  auto loaded = store.Load("pvc-8");

  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  const state::v1::SessionRecord& session = (*loaded)->session;
  ASSERT_TRUE(session.has_userspace());
  EXPECT_EQ(session.userspace().pid(), 4242);
  EXPECT_EQ(session.userspace().start_time(), 77u);
  EXPECT_EQ(session.userspace().runtime_dir(), "/run/stagehand/sessions/ab");
  EXPECT_EQ(session.userspace().lun_file(), "/run/stagehand/sessions/ab/mnt/lun");
  EXPECT_EQ(session.userspace().keeper_pid(), 4241);
  EXPECT_EQ(session.userspace().generation(), 2u);
  EXPECT_EQ((*loaded)->Device(), "/dev/loop4");
  EXPECT_EQ(session.pid(), 0) << "the flat fields are cleared";
}

// Records keep the access mode by its CSI name; one the build does not know (or none, in
// records older than the field) is UNKNOWN, which equals no requested mode.
TEST_F(VolumeStoreTest, TheAccessModeIsReadByName) {
  using Mode = csi::v1::VolumeCapability::AccessMode;
  VolumeStore store(dir_);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());

  const struct {
    const char* field;
    Mode::Mode want;
  } cases[] = {
      {"", Mode::UNKNOWN},
      {R"(, "access_mode": "MULTI_NODE_READER_ONLY")", Mode::MULTI_NODE_READER_ONLY},
      {R"(, "access_mode": "SINGLE_NODE_SINGLE_WRITER")", Mode::SINGLE_NODE_SINGLE_WRITER},
      {R"(, "access_mode": "5")", Mode::UNKNOWN},  // An ordinal is not a name.
      {R"(, "access_mode": "SOME_FUTURE_MODE")", Mode::UNKNOWN},
  };

  for (const auto& c : cases) {
    ASSERT_THAT(
        WriteFileAtomically(
            store.PathFor("v"),
            absl::StrCat(R"({"volume_id":"v","phase":"STAGED","staging_path":"/s")", c.field, "}"),
            0600),
        IsOk());
    auto loaded = store.Load("v");
    ASSERT_THAT(loaded, IsOk()) << c.field;
    ASSERT_TRUE(loaded->has_value());
    EXPECT_EQ((*loaded)->capability.access_mode, c.want) << c.field;
    EXPECT_EQ((*loaded)->capability.read_only_mode, IsReaderOnly(c.want)) << c.field;
  }
}

TEST_F(VolumeStoreTest, CorruptRecordIsDataLossNotAbsence) {
  VolumeStore store(dir_);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());
  ASSERT_THAT(WriteFileAtomically(store.PathFor("v"), "{ not json", 0600), IsOk());

  EXPECT_THAT(store.Load("v"), StatusIs(absl::StatusCode::kDataLoss));
  std::vector<std::string> errors;
  EXPECT_TRUE(store.List(&errors).empty());
  EXPECT_EQ(errors.size(), 1u);
}

TEST_F(VolumeStoreTest, ARecordLackingWhatUnstageNeedsIsDataLossNotAbsence) {
  VolumeStore store(dir_);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());
  ASSERT_THAT(WriteFileAtomically(store.PathFor("v1"), R"({"volume_id":"v1"})", 0600), IsOk());

  auto loaded = store.Load("v1");
  EXPECT_THAT(loaded, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("lacks phase, staging_path"));
  std::vector<std::string> errors;
  EXPECT_TRUE(store.List(&errors).empty());
  EXPECT_EQ(errors.size(), 1u);
}

TEST_F(VolumeStoreTest, ARecordOfAnotherVolumeAtThisPathIsDataLoss) {
  VolumeStore store(dir_);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());
  ASSERT_THAT(
      WriteFileAtomically(store.PathFor("v1"),
                          R"({"volume_id":"v2","phase":"STAGED","staging_path":"/s"})", 0600),
      IsOk());

  EXPECT_THAT(store.Load("v1"), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(VolumeStoreTest, FormatIntentsNeedOnlyParse) {
  FormatIntentStore intents(dir_);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());
  VolumeStore layout(dir_);  // The same file names.
  ASSERT_THAT(
      WriteFileAtomically(layout.PathFor("v1"),
                          R"({"volume_id":"v1","identity":{"serial":"s1"},"fs_type":"xfs"})", 0600),
      IsOk());

  auto loaded = intents.Load("v1");

  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->identity.serial, "s1");
  EXPECT_EQ((*loaded)->fs_type, "xfs");
  EXPECT_THAT(intents.Remove("v1"), IsOk());
  auto gone = intents.Load("v1");
  ASSERT_THAT(gone, IsOk());
  EXPECT_FALSE(gone->has_value());
}

TEST_F(VolumeStoreTest, FormatIntentsRoundTrip) {
  FormatIntentStore intents(dir_);
  FormatIntent intent{
      .volume_id = "v2", .identity = {{"naa.6001"}, "s2", "", ""}, .fs_type = "ext4"};

  ASSERT_THAT(intents.Save(intent), IsOk());
  auto loaded = intents.Load("v2");

  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->volume_id, "v2");
  EXPECT_EQ((*loaded)->identity, intent.identity);
  EXPECT_EQ((*loaded)->fs_type, "ext4");
}

}  // namespace
}  // namespace stagehand::driver
