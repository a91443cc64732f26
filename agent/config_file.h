#pragma once

// /etc/stagehand/config.yaml: every flag of `stagehand` as a key (the long flag name without
// dashes) in a flat YAML map; flags on the command line win. A CLI11 config formatter, so that
// CLI11 applies the values exactly as if they had been given as flags.

#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace stagehand::agent {

class YamlConfig final : public CLI::Config {
 public:
  // `known`: the accepted keys. Unknown keys are errors naming the line and the key.
  explicit YamlConfig(std::set<std::string> known) : known_(std::move(known)) {}

  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  // Throws CLI::ConfigError (CLI11's contract) with "config file line N: ..." on bad input.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  std::set<std::string> known_;
};

// The long names of `app`'s options ("state-dir", "watch-plugins", "no-watch-plugins"), without
// help, version and `exclude`.
std::set<std::string> LongOptionNames(const CLI::App& app, const std::set<std::string>& exclude);

// argv with every `--name=` (an empty value after '=') split into `--name` and "": CLI11 would
// otherwise take the next argument as the value (`--metrics-address= --node-id=x` set the
// metrics address to "--node-id=x").
std::vector<std::string> SplitEmptyAssignments(int argc, const char* const* argv);

}  // namespace stagehand::agent
