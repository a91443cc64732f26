#include "driver/lun_claims.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "iscsi/session_conversions.h"

namespace stagehand::driver {
namespace {

using state::v1::VolumeRecord;

VolumeRecord Record(const std::string& id, const std::string& iqn, int lun,
                    const std::vector<std::pair<std::string, int>>& portals,
                    const std::string& wwn = "") {
  VolumeRecord r;
  r.set_volume_id(id);
  r.set_iqn(iqn);
  r.set_lun(lun);
  for (const auto& [host, port] : portals) {
    auto* p = r.add_portals();
    p->set_host(host);
    p->set_port(port);
  }
  if (!wwn.empty()) {
    iscsi::LunIdentity identity;
    identity.designators = {"naa." + wwn};
    iscsi::ToProto(identity, r.mutable_identity());
  }
  return r;
}

constexpr char kIqn[] = "iqn.2026-11.dev.stagehand:t";

TEST(FindVolumeOnLunTest, ByAddressBeforeTheLunIsRead) {
  const std::vector<VolumeRecord> records = {
      Record("a", kIqn, 1, {{"10.0.0.1", 3260}}),
      Record("b", kIqn, 2, {{"10.0.0.1", 3260}}),
      Record("c", "iqn.2026-11.dev.stagehand:other", 1, {{"10.0.0.1", 3260}}),
  };

  struct Case {
    const char* name;
    VolumeRecord mine;
    const char* want;  // "" = none.
  };

  const std::vector<Case> cases = {
      {"same target, LUN and portal", Record("x", kIqn, 1, {{"10.0.0.1", 3260}}), "a"},
      {"another LUN number", Record("x", kIqn, 3, {{"10.0.0.1", 3260}}), ""},
      {"another port", Record("x", kIqn, 1, {{"10.0.0.1", 3261}}), ""},
      {"another host", Record("x", kIqn, 1, {{"10.0.0.2", 3260}}), ""},
      {"one common portal of several",
       Record("x", kIqn, 2, {{"10.0.0.9", 3260}, {"10.0.0.1", 3260}}), "b"},
      {"its own record", Record("a", kIqn, 1, {{"10.0.0.1", 3260}}), ""},
  };
  for (const Case& c : cases) {
    auto found = FindVolumeOnLun(records, c.mine, nullptr);
    EXPECT_EQ(found ? found->volume_id() : "", c.want) << c.name;
  }
}

TEST(FindVolumeOnLunTest, ByIdentityOnceTheLunIsRead) {
  const std::vector<VolumeRecord> records = {
      Record("a", kIqn, 1, {{"10.0.0.1", 3260}}, "600140512345678"),
      Record("b", kIqn, 2, {{"10.0.0.1", 3260}}),  // No identity recorded.
  };
  const VolumeRecord mine = Record("x", "iqn.2026-11.dev.stagehand:alias", 7, {{"10.9.9.9", 1}});
  iscsi::LunIdentity same;
  same.designators = {"naa.600140512345678"};
  iscsi::LunIdentity other;
  other.designators = {"naa.600140599999999"};
  const iscsi::LunIdentity none;
  auto found = FindVolumeOnLun(records, mine, &same);
  EXPECT_EQ(found ? found->volume_id() : "", "a") << "the same LUN under another name and address";
  EXPECT_FALSE(FindVolumeOnLun(records, mine, &other).has_value());
  EXPECT_FALSE(FindVolumeOnLun(records, mine, &none).has_value())
      << "an empty identity matches nothing";
}

TEST(DescribeRecordTest, SaysHowFarTheStageGot) {
  VolumeRecord r;
  r.set_staging_path("/s");
  r.set_phase(VolumeRecord::STAGED);
  EXPECT_EQ(DescribeRecord(r), "staged at '/s'");
  r.set_phase(VolumeRecord::UNSTAGING);
  EXPECT_EQ(DescribeRecord(r), "being unstaged from '/s'");
  r.set_phase(VolumeRecord::STAGING);
  EXPECT_EQ(DescribeRecord(r), "half staged at '/s'");
}

}  // namespace
}  // namespace stagehand::driver
