#include "agent/driver_volumes.h"

#include <absl/strings/str_cat.h>

#include "standalone/csi_node_client.h"

namespace stagehand::agent {
namespace {

using state::v1::VolumeRecord;

const char* PhaseOf(const VolumeRecord& rec) {
  switch (rec.phase()) {
    case VolumeRecord::STAGED:
      return rec.publishes().empty() ? "staged" : "published";
    case VolumeRecord::STAGING:
      return "staging";
    case VolumeRecord::UNSTAGING:
      return "unstaging";
    default:
      return "uncertain";
  }
}

// "Reason: message; ..." of the volume's health, empty when it is healthy or not staged.
std::string ConditionOf(driver::NodeService& node, const VolumeRecord& rec) {
  if (rec.phase() != VolumeRecord::STAGED) {
    return "";
  }
  csi::v1::NodeGetVolumeHealthRequest request;
  request.set_volume_id(rec.volume_id());
  csi::v1::NodeGetVolumeHealthResponse response;
  if (auto s = node.Health(request, &response); !s.ok()) {
    return absl::StrCat("health unknown: ", s.message());
  }
  return standalone::DescribeProblems(standalone::ProblemsOf(response.volume_health()));
}

}  // namespace

void ListDriverVolumes(driver::NodeService& node, const std::string& driver_name,
                       v1::ListVolumesResponse* out, std::vector<std::string>* problems) {
  out->set_generation(1);
  out->set_ready(true);
  std::vector<std::string> errors;
  for (const VolumeRecord& rec : node.Records(&errors)) {
    auto* v = out->add_volumes();
    v->set_name(rec.volume_id());
    v->set_declared(true);  // The kubelet (or a CSI client) asked for it.
    v->set_driver(driver_name);
    v->set_volume_handle(rec.volume_id());
    v->set_staging_path(rec.staging_path());
    v->set_phase(PhaseOf(rec));
    v->set_stage_state(rec.phase() == VolumeRecord::STAGED ? "staged" : "uncertain");
    for (const auto& p : rec.publishes()) {
      auto* t = v->add_targets();
      t->set_target_path(p.target_path());
      t->set_read_only(p.readonly());
      t->set_state("published");
    }
    v->set_condition(ConditionOf(node, rec));
    if (!v->condition().empty()) {
      problems->push_back(
          absl::StrCat("volume '", rec.volume_id(), "' is abnormal: ", v->condition()));
    }
  }
  for (const auto& e : errors) {
    problems->push_back(absl::StrCat("unreadable volume record: ", e));
  }
}

}  // namespace stagehand::agent
