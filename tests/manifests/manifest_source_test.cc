#include "manifests/manifest_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::manifests {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;

enum class Kind { kDeclared, kError, kRemoved, kRenamed, kListed, kProblem };

struct Event {
  Kind kind;
  std::string file;
  std::string volume;  // kDeclared; kRenamed: the new file name.
  absl::Status error;  // kError.
};

// Records callbacks; the test thread waits for them on a condition variable.
class RecordingListener : public ManifestListener {
 public:
  void OnVolumeDeclared(const std::string& file, const reconciler::VolumeSpec& spec) override {
    Push({Kind::kDeclared, file, spec.name, absl::OkStatus()});
  }

  void OnManifestError(const std::string& file, const absl::Status& error) override {
    Push({Kind::kError, file, "", error});
  }

  void OnManifestRemoved(const std::string& file) override {
    Push({Kind::kRemoved, file, "", absl::OkStatus()});
  }

  void OnManifestRenamed(const std::string& from, const std::string& to) override {
    Push({Kind::kRenamed, from, to, absl::OkStatus()});
  }

  void OnDirectoryListed() override {
    if (record_listings) {
      Push({Kind::kListed, "", "", absl::OkStatus()});
    }
  }

  void OnProblem(const std::optional<std::string>& problem) override {
    if (record_problems && problem.has_value()) {
      Push({Kind::kProblem, *problem, "", absl::OkStatus()});  // The text in `file`.
    }
  }

  bool record_listings = false;  // Set before the source starts.
  std::atomic<bool> record_problems{false};

  // The next callback in order. The deadline only keeps a broken test from hanging.
  std::optional<Event> Next() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !events_.empty(); })) {
      return std::nullopt;
    }
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  void Push(Event e) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

std::string Manifest(const std::string& name, const std::string& extra = "") {
  return "name: " + name + "\ndriver: iscsi.stagehand.dev\nvolumeHandle: " + name +
         "\ncapability:\n  block: {}\n" + extra;
}

class ManifestSourceTest : public ::testing::Test {
 protected:
  void TearDown() override { source_.reset(); }

  void StartSource(bool create_if_missing = true) {
    auto source = ManifestSource::Start(dir_, state_dir_, listener_, create_if_missing);
    ASSERT_THAT(source, IsOk());
    source_ = std::move(*source);
  }

  // Writes in place: open, write, close (IN_CLOSE_WRITE).
  void Write(const std::string& file, const std::string& content) {
    FILE* f = fopen((dir_ + "/" + file).c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(fwrite(content.data(), 1, content.size(), f), content.size());
    ASSERT_EQ(fclose(f), 0);
  }

  // Writes a temp file and renames it over `file` (IN_MOVED_TO).
  void Replace(const std::string& file, const std::string& content) {
    ASSERT_THAT(WriteFileAtomically(dir_ + "/" + file, content, 0644), IsOk());
  }

  void ExpectDeclared(const std::string& file, const std::string& volume) {
    std::optional<Event> e = listener_.Next();
    ASSERT_TRUE(e.has_value()) << "no callback; expected " << file << " declared";
    EXPECT_EQ(e->kind, Kind::kDeclared) << e->file << ": " << e->error;
    EXPECT_EQ(e->file, file);
    EXPECT_EQ(e->volume, volume);
  }

  absl::Status ExpectError(const std::string& file) {
    std::optional<Event> e = listener_.Next();
    EXPECT_TRUE(e.has_value()) << "no callback; expected an error for " << file;
    if (!e.has_value()) {
      return absl::OkStatus();
    }
    EXPECT_EQ(e->kind, Kind::kError) << e->file;
    EXPECT_EQ(e->file, file);
    return e->error;
  }

  void ExpectRemoved(const std::string& file) {
    std::optional<Event> e = listener_.Next();
    ASSERT_TRUE(e.has_value()) << "no callback; expected " << file << " removed";
    EXPECT_EQ(e->kind, Kind::kRemoved) << e->file;
    EXPECT_EQ(e->file, file);
  }

  void ExpectRenamed(const std::string& from, const std::string& to) {
    std::optional<Event> e = listener_.Next();
    ASSERT_TRUE(e.has_value()) << "no callback; expected " << from << " renamed to " << to;
    EXPECT_EQ(e->kind, Kind::kRenamed) << e->file;
    EXPECT_EQ(e->file, from);
    EXPECT_EQ(e->volume, to);
  }

  void Rename(const std::string& from, const std::string& to) {
    ASSERT_EQ(rename((dir_ + "/" + from).c_str(), (dir_ + "/" + to).c_str()), 0);
  }

  stagehand::testing::TempDir temp_;
  const std::string root_ = temp_.path();
  std::string dir_ = root_ + "/manifests";
  const std::string state_dir_ = root_ + "/state";
  RecordingListener listener_;
  std::unique_ptr<ManifestSource> source_;
};

TEST_F(ManifestSourceTest, CreatesTheDirectory) {
  StartSource();

  struct stat st {};

  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

// A typo in --manifest-dir or an unmounted config volume must not read as "nothing declared".
TEST_F(ManifestSourceTest, AMissingDirectoryIsAProblemUntilItAppears) {
  listener_.record_listings = true;
  StartSource(/*create_if_missing=*/false);

  struct stat st {};

  EXPECT_NE(stat(dir_.c_str(), &st), 0) << "not created";
  ASSERT_TRUE(source_->Problem().has_value());
  EXPECT_THAT(*source_->Problem(), HasSubstr("does not exist"));
  // `mkdir` and then the files: the empty directory is not "nothing declared".
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Replace("a.yaml", Manifest("a"));
  ExpectDeclared("a.yaml", "a");
  std::optional<Event> listed = listener_.Next();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->kind, Kind::kListed) << "listed once a manifest is there";
  EXPECT_FALSE(source_->Problem().has_value());
}

TEST_F(ManifestSourceTest, ADirectoryThatComesBackEmptyRemovesNothingUntilAManifestAppears) {
  StartSource();
  listener_.record_problems = true;
  Write("a.yaml", Manifest("a"));
  Write("b.yaml", Manifest("b"));
  ExpectDeclared("a.yaml", "a");
  ExpectDeclared("b.yaml", "b");

  ASSERT_EQ(rename(dir_.c_str(), (dir_ + ".old").c_str()), 0);
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  std::optional<Event> lost = listener_.Next();
  std::optional<Event> held = listener_.Next();
  ASSERT_TRUE(lost.has_value() && held.has_value());
  EXPECT_THAT(lost->file, HasSubstr("was moved away"));
  EXPECT_EQ(held->kind, Kind::kProblem);
  EXPECT_THAT(held->file, HasSubstr("is empty after it was missing"));
  Replace("b.yaml", Manifest("b"));

  // Only now is the directory listed: a is gone, b is unchanged (not reported again).
  ExpectRemoved("a.yaml");
  ASSERT_THAT(RunProcess({"rm", "-rf", dir_ + ".old"}), IsOk());
}

TEST_F(ManifestSourceTest, AMissingDirectoryWhoseParentIsMissingTooIsFoundOnceCreated) {
  dir_ = root_ + "/etc/stagehand/volumes.d";
  listener_.record_listings = true;
  StartSource(/*create_if_missing=*/false);
  ASSERT_TRUE(source_->Problem().has_value());

  ASSERT_THAT(MakeDirs(root_ + "/etc", 0755), IsOk());
  ASSERT_THAT(MakeDirs(root_ + "/etc/stagehand", 0755), IsOk());
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Replace("a.yaml", Manifest("a"));

  ExpectDeclared("a.yaml", "a");
  std::optional<Event> listed = listener_.Next();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->kind, Kind::kListed);
  EXPECT_FALSE(source_->Problem().has_value());
}

TEST_F(ManifestSourceTest, AnExistingDirectoryIsListedAtStart) {
  listener_.record_listings = true;
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Write("a.yaml", Manifest("a"));

  StartSource(/*create_if_missing=*/false);

  ExpectDeclared("a.yaml", "a");
  std::optional<Event> listed = listener_.Next();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->kind, Kind::kListed);
  EXPECT_FALSE(source_->Problem().has_value());
}

TEST_F(ManifestSourceTest, SymlinkedAndHardLinkedManifestsAreSeenWhenCreated) {
  StartSource();
  ASSERT_THAT(WriteFileAtomically(root_ + "/a.yaml", Manifest("a"), 0644), IsOk());
  ASSERT_THAT(WriteFileAtomically(root_ + "/b.yaml", Manifest("b"), 0644), IsOk());

  ASSERT_EQ(symlink((root_ + "/a.yaml").c_str(), (dir_ + "/a.yaml").c_str()), 0);
  ExpectDeclared("a.yaml", "a");
  ASSERT_EQ(link((root_ + "/b.yaml").c_str(), (dir_ + "/b.yaml").c_str()), 0);
  ExpectDeclared("b.yaml", "b");
}

TEST_F(ManifestSourceTest, RejectsRelativePaths) {
  EXPECT_THAT(ManifestSource::Start("manifests", state_dir_, listener_),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ManifestSource::Start(dir_, "state/", listener_),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ManifestSourceTest, ReportsExistingFilesSortedByName) {
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Write("b.yaml", Manifest("vol-b"));
  Write("a.yml", Manifest("vol-a"));
  Write("c.yaml", "name: [\n");

  StartSource();

  ExpectDeclared("a.yml", "vol-a");
  ExpectDeclared("b.yaml", "vol-b");
  EXPECT_THAT(ExpectError("c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("c.yaml:2:")));
}

TEST_F(ManifestSourceTest, FollowsEditsAndRemoval) {
  StartSource();

  Write("pg.yaml", Manifest("pg"));
  ExpectDeclared("pg.yaml", "pg");

  Write("pg.yaml", Manifest("pg", "bogus: 1\n"));
  EXPECT_THAT(ExpectError("pg.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(dir_ + "/pg.yaml:6: unknown key 'bogus'")));

  Replace("pg.yaml", Manifest("pg"));
  ExpectDeclared("pg.yaml", "pg");

  ASSERT_EQ(unlink((dir_ + "/pg.yaml").c_str()), 0);
  ExpectRemoved("pg.yaml");
}

TEST_F(ManifestSourceTest, RenameAwayAndBack) {
  StartSource();
  Replace("pg.yaml", Manifest("pg"));
  ExpectDeclared("pg.yaml", "pg");

  ASSERT_EQ(rename((dir_ + "/pg.yaml").c_str(), (dir_ + "/pg.yaml.off").c_str()), 0);
  ExpectRemoved("pg.yaml");

  ASSERT_EQ(rename((dir_ + "/pg.yaml.off").c_str(), (dir_ + "/pg.yaml").c_str()), 0);
  ExpectDeclared("pg.yaml", "pg");
}

TEST_F(ManifestSourceTest, IgnoresDotfilesSwapFilesAndOtherExtensions) {
  StartSource();

  Write(".pg.yaml.swp", "not yaml at all: [");
  Write(".hidden.yaml", Manifest("hidden"));
  Write("notes.txt", "name: [");
  Write("pg.yaml~", "name: [");
  Write("pg.yaml", Manifest("pg"));

  // Callbacks come in event order, so anything reported for the earlier files would come first.
  ExpectDeclared("pg.yaml", "pg");
}

TEST_F(ManifestSourceTest, UnchangedRewriteIsNotReportedAgain) {
  StartSource();
  Write("a.yaml", Manifest("a"));
  ExpectDeclared("a.yaml", "a");

  Write("a.yaml", Manifest("a"));
  Write("b.yaml", Manifest("b"));

  ExpectDeclared("b.yaml", "b");
}

TEST_F(ManifestSourceTest, SameNameInTwoFilesIsAnErrorOnTheSecond) {
  StartSource();
  Write("a.yaml", Manifest("shared"));
  ExpectDeclared("a.yaml", "shared");

  Write("b.yaml", Manifest("shared"));
  EXPECT_THAT(ExpectError("b.yaml"),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("volume 'shared' is already declared in 'a.yaml'")));

  // No promotion when the first file goes; the second is read again on its next change.
  ASSERT_EQ(unlink((dir_ + "/a.yaml").c_str()), 0);
  ExpectRemoved("a.yaml");
  Write("b.yaml", Manifest("shared"));
  ExpectDeclared("b.yaml", "shared");
}

TEST_F(ManifestSourceTest, RenamingAVolumeFreesItsOldName) {
  StartSource();
  Write("a.yaml", Manifest("one"));
  ExpectDeclared("a.yaml", "one");

  Write("a.yaml", Manifest("two"));
  ExpectDeclared("a.yaml", "two");
  Write("b.yaml", Manifest("one"));
  ExpectDeclared("b.yaml", "one");
}

TEST_F(ManifestSourceTest, TargetInsideTheStateDirIsAnError) {
  StartSource();

  Write("pg.yaml", Manifest("pg", "publish:\n  - targetPath: " + state_dir_ + "/mnt\n"));

  EXPECT_THAT(ExpectError("pg.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inside stagehand's state")));
}

TEST_F(ManifestSourceTest, TooLargeFileIsAnError) {
  StartSource();

  Write("big.yaml", Manifest("big") + "#" + std::string(2 << 20, 'x') + "\n");

  EXPECT_THAT(ExpectError("big.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("larger than 1 MiB")));
}

TEST_F(ManifestSourceTest, DirectoryRemovedAndRecreated) {
  StartSource();
  Write("a.yaml", Manifest("a"));
  ExpectDeclared("a.yaml", "a");

  ASSERT_THAT(RunProcess({"rm", "-rf", dir_}), IsOk());
  ExpectRemoved("a.yaml");

  // By rename: the source may be rescanning the new directory while the file is written.
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Replace("b.yaml", Manifest("b"));
  ExpectDeclared("b.yaml", "b");
}

TEST_F(ManifestSourceTest, DirectoryMovedAwayKeepsItsVolumesUntilItIsBack) {
  StartSource();
  Write("a.yaml", Manifest("a"));
  ExpectDeclared("a.yaml", "a");

  ASSERT_EQ(rename(dir_.c_str(), (dir_ + ".old").c_str()), 0);
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Replace("b.yaml", Manifest("b"));

  // Nothing was reported while the directory was away; once it is back, a file that is gone
  // counts as removed.
  ExpectRemoved("a.yaml");
  ExpectDeclared("b.yaml", "b");
  ASSERT_THAT(RunProcess({"rm", "-rf", dir_ + ".old"}), IsOk());
}

TEST_F(ManifestSourceTest, RenameWithinTheDirectoryMovesTheDeclarationWithoutRemovingIt) {
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Write("a.yaml", Manifest("vol-a"));
  StartSource();
  ExpectDeclared("a.yaml", "vol-a");

  Rename("a.yaml", "b.yaml");
  ExpectRenamed("a.yaml", "b.yaml");
  // Unchanged content: nothing more for b.yaml. The next event is the marker's.
  Write("marker.yaml", Manifest("vol-m"));
  ExpectDeclared("marker.yaml", "vol-m");

  // b.yaml still owns vol-a: another file cannot claim it.
  Write("c.yaml", Manifest("vol-a"));
  EXPECT_THAT(ExpectError("c.yaml"), StatusIs(absl::StatusCode::kAlreadyExists,
                                              HasSubstr("already declared in 'b.yaml'")));
}

TEST_F(ManifestSourceTest, RenameOverAnotherFileRemovesThatFilesVolumeFirst) {
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Write("a.yaml", Manifest("vol-a"));
  Write("b.yaml", Manifest("vol-b"));
  StartSource();
  ExpectDeclared("a.yaml", "vol-a");
  ExpectDeclared("b.yaml", "vol-b");

  Rename("a.yaml", "b.yaml");
  ExpectRemoved("b.yaml");
  ExpectRenamed("a.yaml", "b.yaml");
}

TEST_F(ManifestSourceTest, RenameOutOfTheManifestNamesIsARemoval) {
  ASSERT_THAT(MakeDirs(dir_, 0755), IsOk());
  Write("a.yaml", Manifest("vol-a"));
  StartSource();
  ExpectDeclared("a.yaml", "vol-a");

  Rename("a.yaml", "a.yaml.disabled");
  ExpectRemoved("a.yaml");
  Rename("a.yaml.disabled", "a.yaml");
  ExpectDeclared("a.yaml", "vol-a");
}

}  // namespace
}  // namespace stagehand::manifests
