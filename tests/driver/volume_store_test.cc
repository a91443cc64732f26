#include "driver/volume_store.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
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
  state::v1::VolumeRecord r;
  r.set_volume_id("pvc-1/with:odd chars");
  r.set_staging_path("/var/lib/stagehand/staging/pvc-1");
  r.set_phase(state::v1::VolumeRecord::STAGED);

  ASSERT_THAT(store.Save(r), IsOk());
  auto loaded = store.Load("pvc-1/with:odd chars");

  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->phase(), state::v1::VolumeRecord::STAGED);
  EXPECT_EQ(store.List().size(), 1u);
  struct stat st = {};
  ASSERT_EQ(stat(store.PathFor(r.volume_id()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "records may hold volume context: owner-only";
  EXPECT_THAT(store.Remove(r.volume_id()), IsOk());
  EXPECT_THAT(store.Remove(r.volume_id()), IsOk());
  auto gone = store.Load(r.volume_id());
  ASSERT_THAT(gone, IsOk());
  EXPECT_FALSE(gone->has_value());
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

TEST_F(VolumeStoreTest, PartialRecordsNeedOnlyParse) {
  VolumeStore store(dir_, VolumeStore::Records::kPartial);
  ASSERT_THAT(MakeDirs(dir_, 0700), IsOk());
  ASSERT_THAT(WriteFileAtomically(store.PathFor("v1"), R"({"volume_id":"v1"})", 0600), IsOk());

  auto loaded = store.Load("v1");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_TRUE(loaded->has_value());
}

}  // namespace
}  // namespace stagehand::driver
