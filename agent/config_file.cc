#include "agent/config_file.h"

#include <yaml-cpp/yaml.h>

#include <sstream>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

namespace stagehand::agent {
namespace {

std::string Where(const YAML::Node& node) {
  return absl::StrCat("config file line ", node.Mark().line + 1);
}

}  // namespace

std::vector<std::string> SplitEmptyAssignments(int argc, const char* const* argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i > 0 && a.size() > 3 && absl::StartsWith(a, "--") && a.find('=') == a.size() - 1) {
      out.push_back(a.substr(0, a.size() - 1));
      out.emplace_back();
    } else {
      out.push_back(a);
    }
  }
  return out;
}

std::set<std::string> LongOptionNames(const CLI::App& app, const std::set<std::string>& exclude) {
  std::set<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const auto& name : option->get_lnames()) {
      if (name != "help" && name != "version" && !exclude.contains(name)) {
        names.insert(name);
      }
    }
    for (const auto& name : option->get_fnames()) {
      std::string plain = name;
      if (plain.starts_with("!")) {
        plain.erase(0, 1);
      }
      if (plain.starts_with("--")) {
        plain.erase(0, 2);
      }
      if (!exclude.contains(plain)) {
        names.insert(plain);
      }
    }
  }
  return names;
}

std::string YamlConfig::to_config(const CLI::App* app, bool default_also,
                                  bool /*write_description*/, std::string /*prefix*/) const {
  std::ostringstream out;
  for (const CLI::Option* option : app->get_options()) {
    if (option->get_lnames().empty() || !option->get_configurable()) {
      continue;
    }
    const std::string name = option->get_lnames().front();
    if (name == "help" || name == "version" || !known_.contains(name)) {
      continue;
    }
    std::string value = option->as<std::string>();
    if (value.empty() && default_also) {
      value = option->get_default_str();
    }
    if (!value.empty()) {
      out << name << ": " << value << "\n";
    }
  }
  return out.str();
}

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& input) const {
  YAML::Node root;
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    throw CLI::ConfigError(
        absl::StrCat("config file line ", e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  std::vector<CLI::ConfigItem> out;
  if (root.IsNull()) {
    return out;  // An empty (or all-comments) file sets nothing.
  }
  if (!root.IsMap()) {
    throw CLI::ConfigError(absl::StrCat(Where(root), ": the file must be a map of flag: value"));
  }
  for (const auto& entry : root) {
    const YAML::Node key = entry.first;
    const YAML::Node value = entry.second;
    const std::string& name = key.Scalar();
    if (!known_.contains(name)) {
      throw CLI::ConfigError(absl::StrCat(Where(key), ": unknown key '", name,
                                          "'; the keys are the flags of `stagehand --help` "
                                          "without dashes, e.g. state-dir"));
    }
    CLI::ConfigItem item;
    item.name = name;
    if (value.IsScalar()) {
      item.inputs.push_back(value.Scalar());
    } else if (value.IsSequence()) {
      for (const auto& element : value) {
        if (!element.IsScalar()) {
          throw CLI::ConfigError(
              absl::StrCat(Where(element), ": '", name, "' takes a list of plain values"));
        }
        item.inputs.push_back(element.Scalar());
      }
    } else if (value.IsNull()) {
      continue;  // `key:` with nothing: the default.
    } else {
      throw CLI::ConfigError(
          absl::StrCat(Where(value), ": '", name, "' takes a value or a list, not a map"));
    }
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace stagehand::agent
