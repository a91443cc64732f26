#include "tests/mounter/loop_device_fixture.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include "base/paths.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "mounter/libmount_mounter.h"

namespace stagehand::mounter {
namespace {

bool IntegrationEnabled() {
  // Read before any test thread exists.
  const char* env = std::getenv("SH_INTEGRATION");  // NOLINT(concurrency-mt-unsafe)
  return geteuid() == 0 && env != nullptr && std::string_view(env) == "1";
}

// Targets of all mounts at or below `dir`, in mountinfo order.
std::vector<std::string> MountsBelow(const std::string& dir) {
  std::vector<std::string> targets;
  absl::StatusOr<std::vector<MountInfo>> mounts = LibmountMounter().List();
  if (!mounts.ok()) {
    ADD_FAILURE() << mounts.status();
    return targets;
  }
  for (const MountInfo& m : *mounts) {
    if (IsPathWithin(m.target, dir)) {
      targets.push_back(m.target);
    }
  }
  return targets;
}

}  // namespace

absl::Status RunOrFail(const std::vector<std::string>& argv) {
  SH_ASSIGN_OR_RETURN(const ProcessResult r, RunProcess(argv));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("'", ArgvToString(argv), "' exited with ", r.exit_code, ": ", r.output));
  }
  return absl::OkStatus();
}

absl::Status WriteAt(const std::string& path, int64_t offset, std::string_view bytes) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  if (pwrite(fd.Get(), bytes.data(), bytes.size(), offset) != static_cast<ssize_t>(bytes.size())) {
    return ErrnoStatus(errno, absl::StrCat("pwrite '", path, "'"));
  }
  if (fsync(fd.Get()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fsync '", path, "'"));
  }
  return absl::OkStatus();
}

void LoopDeviceTest::SetUp() {
  if (!IntegrationEnabled()) {
    GTEST_SKIP() << "needs root and SH_INTEGRATION=1";
  }
  // A private mount namespace: whatever the test mounts vanishes with the process, even if it
  // is killed before TearDown. (Loop devices are global and still need detaching.)
  ASSERT_EQ(unshare(CLONE_NEWNS), 0) << "unshare: " << ErrnoText(errno);
  ASSERT_EQ(mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0)
      << "make / private: " << ErrnoText(errno);
  std::string tmpl = "/tmp/sh-mounter-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << ErrnoText(errno);
  dir_ = std::move(tmpl);
}

void LoopDeviceTest::TearDown() {
  if (dir_.empty()) {
    return;
  }
  // Unmount from the top of the stack down: later mountinfo lines sit on earlier ones.
  for (int round = 0; round < 64; ++round) {
    std::vector<std::string> targets = MountsBelow(dir_);
    if (targets.empty()) {
      break;
    }
    if (umount2(targets.back().c_str(), 0) != 0) {
      ADD_FAILURE() << "teardown: umount '" << targets.back() << "': " << ErrnoText(errno)
                    << ", detaching lazily";
      umount2(targets.back().c_str(), MNT_DETACH);
    }
  }
  for (const std::string& loop : loops_) {
    const absl::Status s = RunOrFail({"losetup", "-d", loop});
    EXPECT_TRUE(s.ok()) << "teardown: " << s;
  }
  if (const std::vector<std::string> left = MountsBelow(dir_); !left.empty()) {
    ADD_FAILURE() << "teardown: '" << left.front() << "' is still mounted; leaving " << dir_;
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  EXPECT_FALSE(ec) << "teardown: remove " << dir_ << ": " << ec.message();
}

std::string LoopDeviceTest::PathFor(std::string_view name) const {
  return JoinPath(dir_, name);
}

absl::StatusOr<std::string> LoopDeviceTest::AttachLoop(int64_t size_bytes) {
  const std::string file = PathFor(absl::StrCat("disk", loops_.size(), ".img"));
  UniqueFd fd(open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd || ftruncate(fd.Get(), size_bytes) != 0) {
    return ErrnoStatus(errno, absl::StrCat("create '", file, "'"));
  }
  fd.Reset();
  return Attach(file, /*read_only=*/false);
}

absl::StatusOr<std::string> LoopDeviceTest::AttachReadOnlyAlias(const std::string& loop) {
  return Attach(backing_files_.at(loop), /*read_only=*/true);
}

absl::StatusOr<std::string> LoopDeviceTest::Attach(const std::string& file, bool read_only) {
  std::vector<std::string> argv = {"losetup", "--find", "--show"};
  if (read_only) {
    argv.emplace_back("--read-only");
  }
  argv.push_back(file);
  SH_ASSIGN_OR_RETURN(const ProcessResult r, RunProcess(argv));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("losetup: ", r.output));
  }
  std::string loop(absl::StripTrailingAsciiWhitespace(r.output));
  loops_.emplace_back(loop);
  backing_files_[loop] = file;
  return loop;
}

absl::Status LoopDeviceTest::ResizeLoop(const std::string& loop, int64_t size_bytes) {
  const std::string& file = backing_files_.at(loop);
  if (truncate(file.c_str(), size_bytes) != 0) {
    return ErrnoStatus(errno, absl::StrCat("truncate '", file, "'"));
  }
  return RunOrFail({"losetup", "-c", loop});
}

absl::StatusOr<std::string> LoopDeviceTest::MakeDir(std::string_view name) {
  std::string path = PathFor(name);
  if (mkdir(path.c_str(), 0755) != 0) {
    return ErrnoStatus(errno, absl::StrCat("mkdir '", path, "'"));
  }
  return path;
}

absl::StatusOr<std::string> LoopDeviceTest::MakeFile(std::string_view name) {
  std::string path = PathFor(name);
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("create '", path, "'"));
  }
  return path;
}

}  // namespace stagehand::mounter
