#pragma once

// A fresh directory under /tmp for one test, removed with everything in it when the object
// goes. Short paths on purpose: unix socket paths made in it must fit sockaddr_un's 108 bytes.
// Not for directories that may hold mounts (removal would descend into them): the integration
// fixtures unmount first (testbed/stagehand_daemon.h, tests/mounter/loop_device_fixture.h).

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

namespace stagehand::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/sh-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << tmpl << " failed";
      return;
    }
    path_ = tmpl;
  }

  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(path_, ignored);
    }
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace stagehand::testing
