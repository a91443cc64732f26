#include "iscsi/target_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::iscsi {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kIqn[] = "iqn.2026-11.dev.stagehand:t1";

TEST(ParsePortalTest, AcceptsHostPortAndIpv6) {
  struct Case {
    const char* text;
    const char* host;
    uint16_t port;
  };

  const Case cases[] = {
      {"127.0.0.1", "127.0.0.1", 3260},
      {"127.0.0.1:3261", "127.0.0.1", 3261},
      {"san.example.com", "san.example.com", 3260},
      {"[::1]", "::1", 3260},
      {"[fd00::5]:3270", "fd00::5", 3270},
      {"[::ffff:10.0.0.5]:3262", "10.0.0.5", 3262},   // IPv4-mapped: the IPv4 address.
      {"[fe80::1%eth0]:3260", "fe80::1%eth0", 3260},  // Link-local, with its zone.
      {"san_1.example.com", "san_1.example.com", 3260},
      {"127.1:3262", "127.1", 3262},  // 127.0.0.1, as name resolution reads it.
  };
  for (const auto& c : cases) {
    auto p = ParsePortal(c.text);

    ASSERT_THAT(p, IsOk()) << c.text;
    EXPECT_EQ(p->host, c.host);
    EXPECT_EQ(p->port, c.port);
  }
}

TEST(ParsePortalTest, RejectsMalformedPortals) {
  for (const char* text : {"", ":3260", "host:", "host:0", "host:70000", "host:abc", "::1", "[::1",
                           "[::1]x", "[10.0.0.1]", "ho st"}) {
    EXPECT_THAT(ParsePortal(text), StatusIs(absl::StatusCode::kInvalidArgument)) << text;
  }
}

// IPv6 literals are parsed, not pattern-matched: what passed the old character check and
// failed only at login ("Can not resolv") is refused up front.
TEST(ParsePortalTest, RejectsWhatIsNotAnAddressOrAHostName) {
  const std::string long_label(64, 'a');
  for (const char* text :
       {"[::1::2]", "[zz::1]", "[:::]", "[fe80::1%]", "[fe80::1%a b]", "10.0.0.256", "1.2.3.4 x",
        "1.2.3.4.5", "bad..name", "-leading.example.com", "host%x", long_label.c_str()}) {
    EXPECT_THAT(ParsePortal(text), StatusIs(absl::StatusCode::kInvalidArgument)) << text;
  }
}

TEST(ParsePortalTest, FormatsWithBracketsForIpv6) {
  EXPECT_EQ((Portal{"::1", 3260}).ToString(), "[::1]:3260");
  EXPECT_EQ((Portal{"10.0.0.1", 3261}).ToString(), "10.0.0.1:3261");
}

TEST(TargetNameTest, ValidatesIqnEuiNaa) {
  EXPECT_TRUE(IsValidTargetName(kIqn));
  EXPECT_TRUE(IsValidTargetName("iqn.2001-04.com.example"));
  EXPECT_TRUE(IsValidTargetName("eui.02004567A425678D"));
  EXPECT_TRUE(IsValidTargetName("naa.52004567BA64678D"));
  EXPECT_FALSE(IsValidTargetName("iqn.2001.com.example"));
  EXPECT_FALSE(IsValidTargetName("iqn.2001-04"));
  EXPECT_FALSE(IsValidTargetName("target1"));
  EXPECT_FALSE(IsValidTargetName("iqn.2001-04.com.example:has space"));
}

TEST(ParseTargetSpecTest, ParsesFullContext) {
  auto spec =
      ParseTargetSpec({{"targetPortal", "127.0.0.1:3261"},
                       {"portals", "127.0.0.2:3261, 127.0.0.1:3261"},
                       {"iqn", kIqn},
                       {"lun", "3"},
                       {"expectedWWN", "0x6001405ABCDEF0123456789ABCDEF012"},
                       {"expectedSerial", " beaf13 "}},
                      {{"node.session.auth.username", "u"}, {"node.session.auth.password", "p"}});

  ASSERT_THAT(spec, IsOk());
  ASSERT_EQ(spec->portals.size(), 2u);
  EXPECT_EQ(spec->portals[1].host, "127.0.0.2");
  EXPECT_EQ(spec->lun, 3u);
  EXPECT_EQ(spec->expected_wwn, "6001405abcdef0123456789abcdef012");
  EXPECT_EQ(spec->expected_serial, "beaf13");
  ASSERT_TRUE(spec->session_chap.has_value());
  EXPECT_EQ(spec->session_chap->user, "u");
  EXPECT_FALSE(spec->discovery_chap.has_value());
}

TEST(ParseTargetSpecTest, ReplacementTimeoutIsSecondsFromOneToADay) {
  auto with = [](const std::string& v) {
    return ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}, {"replacementTimeout", v}}, {});
  };

  ASSERT_THAT(with("30"), IsOk());
  EXPECT_EQ(with("30")->replacement_timeout_seconds, 30u);
  EXPECT_FALSE(ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}}, {})
                   ->replacement_timeout_seconds.has_value());
  EXPECT_THAT(with("0"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(with("86401"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("replacementTimeout")));
  EXPECT_THAT(with("2m"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseTargetSpecTest, TakeoverAfterIsOffOrSecondsFromThree) {
  auto with = [](const std::string& v) {
    return ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}, {"takeoverAfter", v}}, {});
  };

  ASSERT_THAT(with("off"), IsOk());
  EXPECT_EQ(with("off")->takeover_after_seconds, 0u);
  EXPECT_EQ(with("30")->takeover_after_seconds, 30u);
  EXPECT_EQ(with("3")->takeover_after_seconds, 3u);
  EXPECT_FALSE(ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}}, {})->takeover_after_seconds);
  EXPECT_THAT(with("2"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takeoverAfter")));
  EXPECT_THAT(with("86401"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(with("30s"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseTargetSpecTest, MissingOrBadFieldsAreInvalidArgumentNamingTheKey) {
  EXPECT_THAT(ParseTargetSpec({{"iqn", kIqn}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("targetPortal")));
  EXPECT_THAT(ParseTargetSpec({{"targetPortal", "h"}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("iqn")));
  EXPECT_THAT(ParseTargetSpec({{"targetPortal", "h"}, {"iqn", "bogus"}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("iqn")));
  EXPECT_THAT(ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}, {"lun", "-1"}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lun")));
  EXPECT_THAT(ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}, {"expectedWWN", "xyz"}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expectedWWN")));
  EXPECT_THAT(ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}, {"portals", "a,:1"}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("portals")));
}

TEST(ParseTargetSpecTest, IncompleteChapIsRejectedWithoutEchoingTheSecret) {
  auto spec = ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}},
                              {{"node.session.auth.password", "s3cr3t-value"}});

  EXPECT_THAT(spec, StatusIs(absl::StatusCode::kInvalidArgument,
                             AllOf(HasSubstr("username"), Not(HasSubstr("s3cr3t-value")))));
}

TEST(ParseTargetSpecTest, MutualChapNeedsBothHalves) {
  EXPECT_THAT(ParseTargetSpec({{"targetPortal", "h"}, {"iqn", kIqn}},
                              {{"node.session.auth.username", "u"},
                               {"node.session.auth.password", "p"},
                               {"node.session.auth.username_in", "t"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("password_in")));
}

TEST(ChapFormatterTest, RedactsSecrets) {
  ChapCredentials c{"alice", "topsecret", "", ""};

  const std::string shown = fmt::format("{}", c);

  EXPECT_THAT(shown, HasSubstr("alice"));
  EXPECT_THAT(shown, Not(HasSubstr("topsecret")));
}

}  // namespace
}  // namespace stagehand::iscsi
