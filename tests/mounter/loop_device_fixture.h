#pragma once

// Base fixture for mounter integration tests: a private mount namespace, a scratch directory
// under /tmp and loop devices backed by sparse files in it.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "base/status.h"

namespace stagehand::mounter {

// Skips the test unless it runs as root with SH_INTEGRATION=1. TearDown always undoes what the
// test left behind, in order: unmounts everything below the scratch directory, detaches the loop
// devices, then removes the directory (only if nothing is mounted below it any more).
class LoopDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The scratch directory, e.g. "/tmp/sh-mounter-AbC123".
  const std::string& ScratchDir() const { return dir_; }

  // `ScratchDir()/name`.
  std::string PathFor(std::string_view name) const;

  // Creates a sparse `size_bytes` file and attaches it; returns the loop device ("/dev/loop3").
  absl::StatusOr<std::string> AttachLoop(int64_t size_bytes);

  // Attaches the file behind `loop` a second time, read-only; returns the new loop device.
  // (Unlike `blockdev --setro`, whose flag outlives the loop device, this leaves no trace.)
  absl::StatusOr<std::string> AttachReadOnlyAlias(const std::string& loop);

  // Grows the file behind `loop` to `size_bytes` and makes the kernel see it (losetup -c).
  absl::Status ResizeLoop(const std::string& loop, int64_t size_bytes);

  // Creates the directory `ScratchDir()/name` and returns its path.
  absl::StatusOr<std::string> MakeDir(std::string_view name);

  // Creates an empty file `ScratchDir()/name` and returns its path.
  absl::StatusOr<std::string> MakeFile(std::string_view name);

 private:
  absl::StatusOr<std::string> Attach(const std::string& file, bool read_only);

  std::string dir_;
  std::vector<std::string> loops_;
  std::map<std::string, std::string> backing_files_;  // Loop device -> its backing file.
};

// Writes `bytes` at `offset` of `path` and syncs it.
absl::Status WriteAt(const std::string& path, int64_t offset, std::string_view bytes);

// Runs `argv`; a non-zero exit becomes Internal with the output.
absl::Status RunOrFail(const std::vector<std::string>& argv);

}  // namespace stagehand::mounter
