#include "health/reason.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#ifndef STAGEHAND_SOURCE_DIR
#error "STAGEHAND_SOURCE_DIR must be defined (the README's health table is read from there)"
#endif

namespace stagehand::health {
namespace {

// "([A-Z][a-z]+)+": words of one capital and at least one small letter. (Not std::regex: GCC 12
// warns inside <regex> under the sanitizers, which CI builds with -Werror.)
bool IsCamelCase(std::string_view name) {
  if (name.empty()) {
    return false;
  }
  for (size_t i = 0; i < name.size();) {
    if (!absl::ascii_isupper(static_cast<unsigned char>(name[i]))) {
      return false;
    }
    const size_t word = ++i;
    while (i < name.size() && absl::ascii_islower(static_cast<unsigned char>(name[i]))) {
      ++i;
    }
    if (i == word) {
      return false;
    }
  }
  return true;
}

// The `Name`s of a README cell: what stands between backticks and is letters only.
std::vector<std::string> QuotedNames(const std::string& cell) {
  std::vector<std::string> names;
  const std::vector<std::string> pieces = absl::StrSplit(cell, '`');
  for (size_t i = 1; i < pieces.size(); i += 2) {
    const std::string& piece = pieces[i];
    if (!piece.empty() && std::all_of(piece.begin(), piece.end(), [](char c) {
          return absl::ascii_isalpha(static_cast<unsigned char>(c));
        })) {
      names.push_back(piece);
    }
  }
  return names;
}

TEST(ReasonTest, EveryReasonHasOneDistinctCamelCaseName) {
  std::set<std::string_view> names;
  for (const ReasonInfo& info : AllReasons()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name << " twice";
    EXPECT_TRUE(IsCamelCase(info.name)) << info.name;
    EXPECT_EQ(ReasonNamed(info.name), info.reason);
    EXPECT_EQ(&Info(info.reason), &info);
  }
  EXPECT_EQ(ReasonNamed("SomeOtherDriversReason"), std::nullopt);
}

TEST(ReasonTest, OnlyReasonsThatKeepTheDeviceLetTheStagingStand) {
  for (const ReasonInfo& info : AllReasons()) {
    if (info.staging_stands) {
      EXPECT_TRUE(info.heals) << info.name;
      EXPECT_EQ(info.storage, StorageClass::kNone) << info.name;
    }
  }
  EXPECT_TRUE(Info(Reason::kSessionRestarting).staging_stands);
  EXPECT_FALSE(Info(Reason::kSessionGone).staging_stands);
}

TEST(ReasonTest, StorageClassesHaveTheirOwnNames) {
  EXPECT_EQ(StorageReasonName(StorageClass::kUnreachable), "TargetUnreachable");
  EXPECT_EQ(StorageReasonName(StorageClass::kDegraded), "PathsDegraded");
  EXPECT_EQ(StorageReasonName(StorageClass::kNone), "");
}

// One row of the README's table: the reasons it names, their status, storage health and whether
// they heal by themselves ("yes…" or "no…").
struct Row {
  std::string status;
  std::string storage;
  bool heals = false;
};

std::map<std::string, Row> ReadmeTable() {
  std::ifstream in(std::string(STAGEHAND_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::string, Row> rows;
  bool inside = false;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (absl::StartsWith(line, "| reason | status | storage health | heals by itself |")) {
      inside = true;
      continue;
    }
    if (!inside || absl::StartsWith(line, "|---")) {
      continue;
    }
    if (!absl::StartsWith(line, "|")) {
      break;
    }
    std::vector<std::string> cells = absl::StrSplit(line, " | ");
    if (cells.size() < 4) {
      ADD_FAILURE() << "a row with fewer than four cells: " << line;
      continue;
    }
    const std::string storage(absl::StripSuffix(absl::StripPrefix(cells[2], "`"), "`"));
    const Row row{cells[1], storage == "—" ? "" : storage, absl::StartsWith(cells[3], "yes")};
    EXPECT_TRUE(absl::StartsWith(cells[3], "yes") || absl::StartsWith(cells[3], "no"))
        << "'heals by itself' starts with yes or no: " << line;
    for (const std::string& name : QuotedNames(cells[0])) {
      rows[name] = row;
    }
  }
  return rows;
}

TEST(ReasonTest, TheReadmeTableSaysWhatTheTypedTableSays) {
  const std::map<std::string, Row> readme = ReadmeTable();
  ASSERT_FALSE(readme.empty()) << "no health table in README.md";

  for (const ReasonInfo& info : AllReasons()) {
    SCOPED_TRACE(info.name);
    auto it = readme.find(std::string(info.name));
    ASSERT_NE(it, readme.end()) << "missing from the README's health table";
    EXPECT_EQ(it->second.status, SeverityName(info.severity));
    EXPECT_EQ(it->second.storage, StorageReasonName(info.storage));
    EXPECT_EQ(it->second.heals, info.heals);
  }
  for (const auto& [name, row] : readme) {
    EXPECT_TRUE(ReasonNamed(name).has_value()) << name << " is in the README but not a reason";
  }
}

}  // namespace
}  // namespace stagehand::health
