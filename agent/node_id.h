#pragma once

#include <string>

#include "base/status.h"

namespace stagehand::agent {

// Checks the node id that NodeGetInfo reports. Every mode refuses an empty id and a Kubernetes
// dependent-variable reference left unexpanded ("$(NODE_NAME)": the env entry is missing or
// misspelt). In Kubernetes mode the id must also be a node name the API server accepts (a
// DNS-1123 subdomain, as the API server's node-name check has it: at most 253 characters of
// lower-case letters, digits, '-' and '.', each dot-separated part starting and ending with a
// letter or digit), since the kubelet records it
// in the node's CSINode object. InvalidArgument says which rule the id breaks.
absl::Status ValidateNodeId(const std::string& node_id, bool kubernetes);

}  // namespace stagehand::agent
