#include "agent/config_file.h"

#include <cstdio>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/logging.h"

namespace stagehand::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Flags {
  std::string state_dir = "/var/lib/stagehand";
  int parallel = 8;
  bool watch = true;
  std::vector<std::string> list;
};

// Parses `argv` with a config file holding `yaml`; returns CLI11's exit code and the message.
std::pair<int, std::string> Parse(const std::string& yaml, const std::vector<std::string>& args,
                                  Flags& flags) {
  char path[] = "/tmp/shcfgXXXXXX";
  const int fd = mkstemp(path);
  std::ofstream(path) << yaml;
  close(fd);
  CLI::App app{"test"};
  app.add_option("--state-dir", flags.state_dir);
  app.add_option("--max-parallel-operations", flags.parallel);
  app.add_flag("--watch-plugins,!--no-watch-plugins", flags.watch);
  app.add_option("--mount-flag", flags.list);
  app.set_config("--config");
  app.config_formatter(std::make_shared<YamlConfig>(LongOptionNames(app, {"config"})));
  std::vector<const char*> given = {"stagehand"};
  const std::string config = std::string("--config=") + path;
  given.push_back(config.c_str());
  for (const auto& a : args) {
    given.push_back(a.c_str());
  }
  std::vector<std::string> argv =
      SplitEmptyAssignments(static_cast<int>(given.size()), given.data());
  std::vector<char*> raw;
  for (auto& a : argv) {
    raw.push_back(a.data());
  }
  int code = 0;
  std::string message;
  try {
    app.parse(static_cast<int>(raw.size()), raw.data());
  } catch (const CLI::ParseError& e) {
    code = e.get_exit_code();
    message = e.what();
  }
  std::remove(path);
  return {code, message};
}

TEST(ConfigFileTest, AnEmptyValueAfterEqualsStaysEmpty) {
  Flags flags;
  auto [code, message] = Parse("", {"--state-dir=", "--max-parallel-operations=3"}, flags);

  EXPECT_EQ(code, 0) << message;
  EXPECT_EQ(flags.state_dir, "");
  EXPECT_EQ(flags.parallel, 3);
}

TEST(ConfigFileTest, ValuesFromTheFileApply) {
  Flags flags;

  auto [code, message] = Parse(
      "state-dir: /srv/state\nmax-parallel-operations: 3\nwatch-plugins: false\n"
      "mount-flag: [noatime, discard]\n",
      {}, flags);

  EXPECT_EQ(code, 0) << message;
  EXPECT_EQ(flags.state_dir, "/srv/state");
  EXPECT_EQ(flags.parallel, 3);
  EXPECT_FALSE(flags.watch);
  EXPECT_THAT(flags.list, ElementsAre("noatime", "discard"));
}

TEST(ConfigFileTest, FlagsWinOverTheFile) {
  Flags flags;

  auto [code, message] =
      Parse("state-dir: /srv/state\nmax-parallel-operations: 3\n", {"--state-dir=/x"}, flags);

  EXPECT_EQ(code, 0) << message;
  EXPECT_EQ(flags.state_dir, "/x");
  EXPECT_EQ(flags.parallel, 3);
}

TEST(ConfigFileTest, UnknownKeysAreErrorsWithTheLine) {
  Flags flags;

  auto [code, message] = Parse("# comment\nstate-dir: /srv\nstate_dir: /typo\n", {}, flags);

  EXPECT_NE(code, 0);
  EXPECT_THAT(message, HasSubstr("line 3"));
  EXPECT_THAT(message, HasSubstr("unknown key 'state_dir'"));
}

TEST(ConfigFileTest, BadValuesAndShapesAreErrors) {
  Flags flags;

  auto [bad_int, int_message] = Parse("max-parallel-operations: many\n", {}, flags);
  auto [map, map_message] = Parse("state-dir: {a: b}\n", {}, flags);
  auto [yaml, yaml_message] = Parse("state-dir: [unclosed\n", {}, flags);
  auto [list, list_message] = Parse("- state-dir\n", {}, flags);

  EXPECT_NE(bad_int, 0);
  EXPECT_NE(map, 0);
  EXPECT_THAT(map_message, HasSubstr("line 1"));
  EXPECT_NE(yaml, 0);
  EXPECT_THAT(yaml_message, HasSubstr("not valid YAML"));
  EXPECT_NE(list, 0);
  EXPECT_THAT(list_message, HasSubstr("map of flag: value"));
}

TEST(ConfigFileTest, AnEmptyFileSetsNothing) {
  Flags flags;

  auto [code, message] = Parse("# nothing here\n", {}, flags);

  EXPECT_EQ(code, 0) << message;
  EXPECT_EQ(flags.state_dir, "/var/lib/stagehand");
}

TEST(LoggingTest, JsonEscapeHandlesQuotesBackslashesAndControls) {
  EXPECT_EQ(JsonEscape("plain"), "plain");
  EXPECT_EQ(JsonEscape("a \"b\" c\\d"), "a \\\"b\\\" c\\\\d");
  EXPECT_EQ(JsonEscape("l1\nl2\t\x01"), "l1\\nl2\\t\\u0001");
}

}  // namespace
}  // namespace stagehand::agent
