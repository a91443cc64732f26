#include "driver/lun_claims.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stagehand::driver {
namespace {

StagedVolume Volume(const std::string& id, const std::string& iqn, uint32_t lun,
                    const std::vector<std::pair<std::string, int>>& portals,
                    const std::string& wwn = "") {
  StagedVolume v;
  v.volume_id = id;
  v.iqn = iqn;
  v.lun = lun;
  for (const auto& [host, port] : portals) {
    v.portals.push_back(iscsi::Portal{host, static_cast<uint16_t>(port)});
  }
  if (!wwn.empty()) {
    v.identity.designators = {"naa." + wwn};
  }
  return v;
}

constexpr char kIqn[] = "iqn.2026-11.dev.stagehand:t";

TEST(FindVolumeOnLunTest, ByAddressBeforeTheLunIsRead) {
  const std::vector<StagedVolume> volumes = {
      Volume("a", kIqn, 1, {{"10.0.0.1", 3260}}),
      Volume("b", kIqn, 2, {{"10.0.0.1", 3260}}),
      Volume("c", "iqn.2026-11.dev.stagehand:other", 1, {{"10.0.0.1", 3260}}),
  };

  struct Case {
    const char* name;
    StagedVolume mine;
    const char* want;  // "" = none.
  };

  const std::vector<Case> cases = {
      {"same target, LUN and portal", Volume("x", kIqn, 1, {{"10.0.0.1", 3260}}), "a"},
      {"another LUN number", Volume("x", kIqn, 3, {{"10.0.0.1", 3260}}), ""},
      {"another port", Volume("x", kIqn, 1, {{"10.0.0.1", 3261}}), ""},
      {"another host", Volume("x", kIqn, 1, {{"10.0.0.2", 3260}}), ""},
      {"one common portal of several",
       Volume("x", kIqn, 2, {{"10.0.0.9", 3260}, {"10.0.0.1", 3260}}), "b"},
      {"its own record", Volume("a", kIqn, 1, {{"10.0.0.1", 3260}}), ""},
  };
  for (const Case& c : cases) {
    auto found = FindVolumeOnLun(volumes, c.mine, nullptr);
    EXPECT_EQ(found ? found->volume_id : "", c.want) << c.name;
  }
}

TEST(FindVolumeOnLunTest, ByIdentityOnceTheLunIsRead) {
  const std::vector<StagedVolume> volumes = {
      Volume("a", kIqn, 1, {{"10.0.0.1", 3260}}, "600140512345678"),
      Volume("b", kIqn, 2, {{"10.0.0.1", 3260}}),  // No identity recorded.
  };
  const StagedVolume mine = Volume("x", "iqn.2026-11.dev.stagehand:alias", 7, {{"10.9.9.9", 1}});
  iscsi::LunIdentity same;
  same.designators = {"naa.600140512345678"};
  iscsi::LunIdentity other;
  other.designators = {"naa.600140599999999"};
  const iscsi::LunIdentity none;
  auto found = FindVolumeOnLun(volumes, mine, &same);
  EXPECT_EQ(found ? found->volume_id : "", "a") << "the same LUN under another name and address";
  EXPECT_FALSE(FindVolumeOnLun(volumes, mine, &other).has_value());
  EXPECT_FALSE(FindVolumeOnLun(volumes, mine, &none).has_value())
      << "an empty identity matches nothing";
}

}  // namespace
}  // namespace stagehand::driver
