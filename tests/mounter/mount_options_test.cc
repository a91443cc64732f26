#include "mounter/mount_options.h"

#include <sys/mount.h>
#include <sys/statvfs.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::mounter {
namespace {

using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;

TEST(JoinMountOptionsTest, JoinsWithCommas) {
  EXPECT_EQ(JoinMountOptions({"ro", "noatime", "discard"}).value(), "ro,noatime,discard");
  EXPECT_EQ(JoinMountOptions({}).value(), "");
}

TEST(JoinMountOptionsTest, RejectsEmptyAndSmuggledOptions) {
  EXPECT_THAT(JoinMountOptions({"ro", ""}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(JoinMountOptions({"noatime,suid"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("noatime,suid")));
}

TEST(JoinMountOptionsTest, KeepsTheCommasOfAQuotedSelinuxContext) {
  const std::string context = R"(context="system_u:object_r:container_file_t:s0:c15,c25")";
  EXPECT_EQ(JoinMountOptions({"noatime", context}).value(), "noatime," + context);
  for (const std::string bad : {R"(context="a:b:c:s0:c1,c2",suid)", R"(context=a:b:c:s0:c1,c2)",
                                R"(context="a:b",c:s0")", R"(fscontext="a:b:c:s0:c1,c2")"}) {
    EXPECT_FALSE(IsQuotedContextOption(bad)) << bad;
    EXPECT_THAT(JoinMountOptions({bad}), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

// libmount keeps one quote state across the joined string: a stray quote in one option would
// hide the commas after it (and an unclosed one drops the rest, such as a reader's "ro").
TEST(JoinMountOptionsTest, NoOptionCanHideTheCommasOfAnother) {
  const std::string context = R"(context="a:b:c:s0:c1,c2")";
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"x\"", R"(context="a,bind,b")"},
        std::vector<std::string>{"x\"", "ro", "noload"}, std::vector<std::string>{"a\\", context},
        std::vector<std::string>{std::string("ro\0,suid", 8)},
        std::vector<std::string>{"noatime\n"}, std::vector<std::string>{R"(context="a"b")"}}) {
    EXPECT_THAT(JoinMountOptions(bad), StatusIs(absl::StatusCode::kInvalidArgument))
        << ::testing::PrintToString(bad);
  }
  EXPECT_THAT(CheckMountOption(context), ::stagehand::testing::IsOk());
}

TEST(SelinuxContextTest, NamesTheContextWithoutQuotes) {
  EXPECT_EQ(SelinuxContext({"noatime", R"(context="u:r:t:s0:c1,c2")"}), "u:r:t:s0:c1,c2");
  EXPECT_EQ(SelinuxContext({"context=u:r:t:s0"}), "u:r:t:s0");
  EXPECT_EQ(SelinuxContext({"noatime"}), "");
  EXPECT_EQ(SelinuxContext({}), "");
}

TEST(BindRemountFlagsTest, MapsReadOnlyAndOptions) {
  EXPECT_EQ(BindRemountFlags(false, {}).value(), 0u);
  EXPECT_EQ(BindRemountFlags(true, {}).value(), uint64_t{MS_RDONLY});
  EXPECT_EQ(BindRemountFlags(true, {"nosuid", "nodev", "noexec"}).value(),
            uint64_t{MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC});
  EXPECT_EQ(BindRemountFlags(false, {"ro"}).value(), uint64_t{MS_RDONLY});
  EXPECT_EQ(BindRemountFlags(false, {"noatime", "nodiratime"}).value(),
            uint64_t{MS_NOATIME | MS_NODIRATIME});
}

TEST(BindRemountFlagsTest, RejectsUnknownOptions) {
  EXPECT_THAT(BindRemountFlags(false, {"rw"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BindRemountFlags(false, {"suid"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'suid'")));
  EXPECT_THAT(BindRemountFlags(true, {"nosuid", "bind"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(InheritedBindFlagsTest, KeepsTheSourceRestrictions) {
  EXPECT_EQ(InheritedBindFlags(0, 0), 0u);
  EXPECT_EQ(InheritedBindFlags(ST_NOSUID | ST_NODEV | ST_NOEXEC | ST_RDONLY, 0),
            uint64_t{MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY});
  EXPECT_EQ(InheritedBindFlags(ST_RELATIME | ST_NODIRATIME, 0),
            uint64_t{MS_RELATIME | MS_NODIRATIME});
  EXPECT_EQ(InheritedBindFlags(ST_NOATIME, 0), uint64_t{MS_NOATIME});
}

TEST(InheritedBindFlagsTest, RequestedAtimeFlagsWin) {
  EXPECT_EQ(InheritedBindFlags(ST_RELATIME | ST_NOSUID, MS_STRICTATIME), uint64_t{MS_NOSUID});
  EXPECT_EQ(InheritedBindFlags(ST_NOATIME, MS_RELATIME), 0u);
}

TEST(HasMountOptionTest, MatchesWholeEntriesOnly) {
  EXPECT_TRUE(HasMountOption("ro,nosuid", "ro"));
  EXPECT_TRUE(HasMountOption("rw,nosuid", "nosuid"));
  EXPECT_FALSE(HasMountOption("rw,errors=remount-ro", "ro"));
  EXPECT_FALSE(HasMountOption("", "ro"));
}

}  // namespace
}  // namespace stagehand::mounter
