#include "registration/registry_files.h"

#include <algorithm>

#include <google/protobuf/util/json_util.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "proto/json_file.h"

namespace stagehand::registration {
namespace {

// Status files for people and tools (root only, as every record in the state directory): every
// field, defaults too; rewritten on each change.
constexpr proto::JsonFileOptions kStatusFile{
    .mode = 0600, .durability = Durability::kAtomicOnly, .print_defaults = true};

}  // namespace

absl::Status WriteJsonFile(const std::string& path, const google::protobuf::Message& message) {
  return proto::WriteJsonFile(path, message, kStatusFile);
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
  MutexLock lock(mu_);
  // The snapshot is taken under our lock, so the last writer also wrote the newest state.
  const state::v1::PluginRegistryStatus status = registry_.Snapshot();
  SH_RETURN_IF_ERROR(WriteJsonFile(plugins_path(), status));
  return WriteJsonFile(csinode_path(), ToCsiNode(node_name_, status));
}

}  // namespace stagehand::registration
