#pragma once

// stagehandctl's `iscsi` commands: SendTargets discovery (iscsi/discovery.h) and a look at one
// LUN, with libiscsi from this process (no iscsid, no kernel session).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>

#include "base/status.h"
#include "iscsi/discovery.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/lun_identity.h"
#include "iscsi/target_spec.h"

namespace stagehand::ctl {

// The initiator name for the CLI: InitiatorName= from `conf` (/etc/iscsi/initiatorname.iscsi)
// if it is readable and has one, else iqn.2026-11.dev.stagehand:stagehandctl.
std::string DefaultInitiatorName(const std::string& conf = "/etc/iscsi/initiatorname.iscsi");

// SendTargets discovery lives in iscsi/discovery.h.
using iscsi::Discover;
using iscsi::DiscoveredTarget;

// The discovery CHAP credentials in `secrets` (node.sendtargets.auth.username/password and the
// mutual _in pair), nullopt when there are none. InvalidArgument when a pair is incomplete.
absl::StatusOr<std::optional<iscsi::ChapCredentials>> DiscoveryChap(
    const std::map<std::string, std::string>& secrets);

struct ProbeResult {
  std::string portal;
  std::string iqn;
  uint32_t lun = 0;
  iscsi::LunIdentity identity;
  std::string revision;  // Standard INQUIRY product revision; empty if the target sent none.
  iscsi::LunCapacity capacity;
};

// Logs in through iscsi::Connection, reads the LUN's identity, revision and capacity, and logs
// out. Errors as Connection reports them.
absl::StatusOr<ProbeResult> Probe(const iscsi::LoginParams& params);

// For `-o json`.
google::protobuf::Struct ToStruct(const std::vector<DiscoveredTarget>& targets);
google::protobuf::Struct ToStruct(const ProbeResult& r);

// For people.
std::string FormatDiscovery(const std::vector<DiscoveredTarget>& targets);
std::string FormatProbe(const ProbeResult& r);

}  // namespace stagehand::ctl
