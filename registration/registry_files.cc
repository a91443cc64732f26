#include "registration/registry_files.h"

#include <algorithm>

#include <google/protobuf/util/json_util.h>

#include "base/file_io.h"
#include "base/paths.h"

namespace stagehand::registration {
namespace {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  auto printed = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!printed.ok()) {
    return absl::InternalError(std::string(printed.message()));
  }
  return json;
}

}  // namespace

absl::Status WriteJsonFile(const std::string& path, const google::protobuf::Message& message,
                           mode_t mode) {
  SH_ASSIGN_OR_RETURN(std::string json, ToJson(message));
  return WriteFileAtomically(path, json, mode, Durability::kAtomicOnly);  // Status, not state.
}

state::v1::CsiNode ToCsiNode(const std::string& node_name,
                             const state::v1::PluginRegistryStatus& status) {
  state::v1::CsiNode node;
  node.set_node_name(node_name);
  for (const auto& plugin : status.plugins()) {
    auto* driver = node.add_drivers();
    driver->set_name(plugin.name());
    driver->set_node_id(plugin.node_id());
    driver->set_allocatable_count(plugin.max_volumes_per_node());
    for (const auto& [key, value] : plugin.topology()) {
      driver->add_topology_keys(key);
    }
    std::sort(driver->mutable_topology_keys()->begin(), driver->mutable_topology_keys()->end());
  }
  return node;
}

std::string RegistryFiles::plugins_path() const {
  return JoinPath(state_dir_, "plugins.json");
}

std::string RegistryFiles::csinode_path() const {
  return JoinPath(state_dir_, "csinode.json");
}

absl::Status RegistryFiles::Write() {
  std::lock_guard lock(mu_);
  // The snapshot is taken under our lock, so the last writer also wrote the newest state.
  const state::v1::PluginRegistryStatus status = registry_.Snapshot();
  SH_RETURN_IF_ERROR(WriteJsonFile(plugins_path(), status));
  return WriteJsonFile(csinode_path(), ToCsiNode(node_name_, status));
}

}  // namespace stagehand::registration
