#pragma once

// Writes what the registry knows to files an operator (and the tests) can read:
//   <state_dir>/plugins.json  every registered plugin (endpoint, versions, capabilities, node info,
//                             health, last error) and every socket whose handshake is failing;
//   <state_dir>/csinode.json  the node's drivers, like the kubelet's CSINode object.
// Both are replaced atomically (mode 0644: they hold no secrets).

#include <sys/types.h>

#include <string>

#include <google/protobuf/message.h>

#include "base/mutex.h"
#include "base/status.h"
#include "registration/registry.h"

namespace stagehand::registration {

class RegistryFiles {
 public:
  RegistryFiles(std::string state_dir, std::string node_name, const Registry& registry)
      : state_dir_(std::move(state_dir)), node_name_(std::move(node_name)), registry_(registry) {}

  // Thread-safe; concurrent calls leave the newest snapshot on disk.
  absl::Status Write();

  std::string plugins_path() const;
  std::string csinode_path() const;

 private:
  std::string state_dir_;
  std::string node_name_;
  const Registry& registry_;
  Mutex mu_;
};

// Writes `message` as indented JSON (every field, defaults too) to `path`, atomically.
absl::Status WriteJsonFile(const std::string& path, const google::protobuf::Message& message);

// The CSINode view of a registry snapshot.
state::v1::CsiNode ToCsiNode(const std::string& node_name,
                             const state::v1::PluginRegistryStatus& status);

}  // namespace stagehand::registration
