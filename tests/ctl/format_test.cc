#include "ctl/format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::ctl {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(UnixTargetTest, AcceptsPathsAndUrls) {
  EXPECT_EQ(UnixTarget("/run/stagehand/agent.sock"), "unix:/run/stagehand/agent.sock");
  EXPECT_EQ(UnixTarget("unix:///run/x.sock"), "unix:/run/x.sock");
  EXPECT_EQ(UnixTarget("unix:/run/x.sock"), "unix:/run/x.sock");
  EXPECT_EQ(UnixTarget("dns:localhost:50051"), "dns:localhost:50051");
}

TEST(ParseKeyValuesTest, LaterItemsWinAndValuesMayHoldEquals) {
  std::map<std::string, std::string> out{{"a", "file"}};
  ASSERT_THAT(ParseKeyValues({"a=flag", "b=x=y", "c="}, "--secret", &out), IsOk());
  EXPECT_EQ(out, (std::map<std::string, std::string>{{"a", "flag"}, {"b", "x=y"}, {"c", ""}}));
}

TEST(ParseKeyValuesTest, RejectsItemsWithoutKey) {
  std::map<std::string, std::string> out;
  auto s = ParseKeyValues({"novalue"}, "--secret", &out);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--secret 'novalue'"));
  EXPECT_THAT(ParseKeyValues({"=v"}, "--secret", &out),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TruncateTest, OneLineAndCut) {
  EXPECT_EQ(Truncate("a\nb\tc", 0), "a b c");
  EXPECT_EQ(Truncate("abcdefghij", 10), "abcdefghij");
  EXPECT_EQ(Truncate("abcdefghijk", 10), "abcdefg...");
}

TEST(HumanBytesTest, Units) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{1} << 30), "1.0 GiB");
}

TEST(TableTest, PadsColumnsAndCutsOnlyTheLast) {
  Table t({"NAME", "ERROR"});
  t.AddRow({"a-long-name", std::string(100, 'x')});
  t.AddRow({"b", "-"});
  const std::string out = t.Render(40);
  EXPECT_EQ(out,
            "NAME         ERROR\n"
            "a-long-name  " +
                std::string(24, 'x') +
                "...\n"
                "b            -\n");
  EXPECT_THAT(t.Render(0), HasSubstr(std::string(100, 'x')));
}

TEST(FormatVolumesTest, CountsTargetsAndShowsTheProblem) {
  agent::v1::ListVolumesResponse r;
  r.set_ready(true);
  auto* v = r.add_volumes();
  v->set_name("data");
  v->set_driver("iscsi.stagehand.dev");
  v->set_phase("waiting");
  v->set_attempts(3);
  v->set_blocked("waiting for driver");
  v->add_targets()->set_state("published");
  v->add_targets()->set_state("pending");
  (*r.mutable_manifest_errors())["bad.yaml"] = "bad.yaml:2: unknown key";
  const std::string out = FormatVolumes(r, 0);
  EXPECT_THAT(out, HasSubstr("data  iscsi.stagehand.dev  waiting  1/2      3         blocked: "
                             "waiting for driver\n"));
  EXPECT_THAT(out, HasSubstr("manifest errors:\n  bad.yaml: bad.yaml:2: unknown key\n"));
  EXPECT_THAT(out, Not(HasSubstr("first reconcile")));
}

TEST(FormatVolumesTest, ShowsEachDataPathsReservation) {
  agent::v1::ListVolumesResponse r;
  r.set_ready(true);
  for (const char* name : {"held", "bare", "shared"}) {
    auto* v = r.add_volumes();
    v->set_name(name);
    v->mutable_data_path()->set_transport("userspace");
    v->mutable_data_path()->set_pid(42);
    v->mutable_data_path()->set_io_flusher(true);
  }
  r.mutable_volumes(0)->mutable_data_path()->set_reservation_key(0x1234abcd00000001);
  r.mutable_volumes(1)->mutable_data_path()->set_unreserved(true);
  const std::string out = FormatVolumes(r, 0);
  EXPECT_THAT(out, HasSubstr(", reserved (key 0x1234abcd00000001)\n"));
  EXPECT_THAT(out, HasSubstr("bare: userspace session pid 42, build , FUSE -, NOT reserved (the "
                             "target has no persistent reservations)\n"));
  EXPECT_THAT(out, HasSubstr("shared: userspace session pid 42, build , FUSE -\n"));
}

TEST(FormatStatusTest, ListsProblems) {
  agent::v1::AgentStatus s;
  s.set_ready(true);
  s.set_volumes(2);
  s.add_problems("volume 'x': boom");
  const std::string out = FormatStatus(s);
  EXPECT_THAT(out, HasSubstr("ready:         yes\n"));
  EXPECT_THAT(out, HasSubstr("volumes:       2 declared, 0 published, 0 failing\n"));
  EXPECT_THAT(out, HasSubstr("problems:\n  - volume 'x': boom\n"));
}

TEST(FormatStatusTest, SaysWhyItIsNotReady) {
  agent::v1::AgentStatus s;
  s.set_ready(false);
  s.set_not_ready_reason("the first reconcile is not done yet");
  EXPECT_THAT(FormatStatus(s),
              HasSubstr("ready:         no (the first reconcile is not done yet)\n"));
}

TEST(FormatStatusTest, SaysHowSessionProcessesRun) {
  agent::v1::AgentStatus s;
  s.set_session_launcher("systemd");
  EXPECT_THAT(FormatStatus(s), HasSubstr("as systemd units (stagehand-session-*.service)"));
  s.set_session_launcher("detached");
  EXPECT_THAT(FormatStatus(s), HasSubstr("detached"));
}

TEST(FormatPluginsTest, ShowsPendingSockets) {
  agent::v1::ListPluginsResponse r;
  auto* p = r.add_plugins();
  p->set_name("a.example.org");
  p->set_healthy(false);
  p->set_last_error("Probe: not ready");
  auto* a = r.add_pending();
  a->set_socket_path("/reg/b.sock");
  a->set_failures(2);
  a->set_last_error("GetInfo: timeout");
  const std::string out = FormatPlugins(r, 0);
  EXPECT_THAT(out, HasSubstr("a.example.org  no"));
  EXPECT_THAT(out, HasSubstr("Probe: not ready\n"));
  EXPECT_THAT(out, HasSubstr("  /reg/b.sock: 2 failures: GetInfo: timeout\n"));
}

}  // namespace
}  // namespace stagehand::ctl
