#include "registration/registry_files.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "registration/registrar_record.h"
#include "registration/registry.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::registration {
namespace {

using stagehand::testing::IsOk;

mode_t ModeOf(const std::string& path) {
  struct stat st {};

  return stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// Every file stagehand keeps in its state directory is root's alone, the status files that
// people read too (they read them as root).
TEST(RegistryFilesTest, TheStatusFilesAreReadableByRootOnly) {
  stagehand::testing::TempDir dir;
  Registry registry;
  RegistryFiles files(dir.path(), "node-1", registry);
  RegistrarRecord registrar(dir.path() + "/registrar.json", "/csi/csi.sock");

  ASSERT_THAT(files.Write(), IsOk());
  registrar.Initial(RegistrarStatus{});

  EXPECT_EQ(ModeOf(files.plugins_path()), 0600u);
  EXPECT_EQ(ModeOf(files.csinode_path()), 0600u);
  EXPECT_EQ(ModeOf(dir.path() + "/registrar.json"), 0600u);
}

}  // namespace
}  // namespace stagehand::registration
