#pragma once

// What csi-sanity talks to in the conformance test: one CSI endpoint (a unix socket) that
// looks like a whole iSCSI CSI driver, a controller and a node plugin in one.
//
// - Controller: a stand-in of ours. CreateVolume hands out a fresh LUN on the test's tgtd (its
//   own target, a sparse backing file, the volume context stagehand needs), DeleteVolume
//   removes it, ControllerExpandVolume grows the backing file and has tgtd re-read the LUN.
// - Node: every call is passed unchanged to the real `stagehand` on its own socket, and its
//   answer (or its gRPC status) is passed back unchanged.
// - Identity: stagehand's answers, with CONTROLLER_SERVICE added to the plugin capabilities.
//   csi-sanity asks the node endpoint whether the driver has a controller; without it, the
//   node specs that create volumes through one (the full lifecycle, idempotency, expansion
//   after a controller expansion) are skipped.
//
// Thread-safe: gRPC calls it from several threads.

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "base/status.h"
#include "testbed/tgtd.h"

namespace stagehand::testing {

struct SanityPluginOptions {
  testbed::Tgtd* tgtd = nullptr;  // Must outlive the plugin.
  std::string lun_dir;            // Backing files of the LUNs it creates.
  std::string node_endpoint;      // stagehand's CSI socket, "unix:///...".
  int first_tid = 100;            // Target ids handed out from here on.
};

class SanityPlugin {
 public:
  explicit SanityPlugin(SanityPluginOptions options);
  SanityPlugin(const SanityPlugin&) = delete;
  SanityPlugin& operator=(const SanityPlugin&) = delete;
  // Stops serving. Volumes not deleted stay on tgtd (the test's tgtd goes with the test).
  ~SanityPlugin();

  // Serves on the unix socket `socket_path`.
  absl::Status Start(const std::string& socket_path);

  // Volumes created and not deleted.
  int LiveVolumes() const;

  // How many calls of the Node RPC `method` ("NodeStageVolume") stagehand answered with OK.
  int SucceededNodeCalls(const std::string& method) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace stagehand::testing
