#pragma once

// The agent-API view of the built-in driver's own volumes, for an agent without a reconciler
// (Kubernetes mode, where the kubelet is the reconciler, or one that only serves the driver):
// what is staged here, where it is published and what is wrong with it, from the driver's
// records and its health checks (no I/O to the LUNs).

#include <string>
#include <vector>

#include "csiclient/reconciler_client.h"
#include "driver/node_service.h"
#include "proto/agent.pb.h"

namespace stagehand::status {

// Fills `out` (generation 1, ready) and appends to `problems` one line per abnormal volume and
// per unreadable record.
void ListDriverVolumes(driver::NodeService& node, const std::string& driver_name,
                       agent::v1::ListVolumesResponse* out, std::vector<std::string>* problems);

// Adds what serves each of the built-in driver's volumes in `out` (a reconciler's listing:
// matched by driver name and volume handle) as its data_path.
void AddDataPaths(driver::NodeService& node, const std::string& driver_name,
                  agent::v1::ListVolumesResponse* out);

// The problems of every staged volume that has any (the metrics of an agent without health
// rounds).
std::vector<csiclient::VolumeHealthSample> DriverVolumeHealth(driver::NodeService& node,
                                                              const std::string& driver_name);

}  // namespace stagehand::status
