#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace stagehand::iscsi {

// The InitiatorName= value of an open-iscsi initiatorname.iscsi file, or "" if there is none.
std::string InitiatorNameFromConf(std::string_view text);

// The iSCSI initiator name to log in with: `flag` if set; else InitiatorName= from
// `iscsi_conf` (/etc/iscsi/initiatorname.iscsi) if present; else a name generated once and
// stored in <state_dir>/initiatorname (iqn.2026-11.dev.stagehand:<hostname>.<random hex>).
absl::StatusOr<std::string> ResolveInitiatorName(const std::string& flag,
                                                 const std::string& iscsi_conf,
                                                 const std::string& state_dir);

}  // namespace stagehand::iscsi
