#include "csiclient/volume_health.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "health/reason.h"

namespace stagehand::csiclient {

std::vector<VolumeHealthProblem> ProblemsOf(const csi::v1::VolumeHealth& health) {
  std::vector<VolumeHealthProblem> problems;
  for (const auto& entry : health.health_statuses()) {
    VolumeHealthProblem p;
    p.status = csi::v1::VolumeHealthErrorType_Name(entry.status());
    p.reason = entry.reason().empty() ? p.status : entry.reason();
    p.message = entry.message();
    if (auto known = health::ReasonNamed(p.reason)) {
      p.heals = health::Info(*known).heals;
    }
    problems.push_back(std::move(p));
  }
  return problems;
}

std::string DescribeProblems(const std::vector<VolumeHealthProblem>& problems) {
  std::vector<std::string> parts;
  for (const auto& p : problems) {
    parts.push_back(p.message.empty() ? p.reason : absl::StrCat(p.reason, ": ", p.message));
  }
  return absl::StrJoin(parts, "; ");
}

void FillStats(const csi::v1::NodeGetVolumeStatsResponse& response, VolumeStatsSample& out) {
  for (const auto& usage : response.usage()) {
    if (usage.unit() == csi::v1::VolumeUsage::BYTES) {
      out.capacity_bytes = usage.total();
      out.available_bytes = usage.available();
      out.used_bytes = usage.used();
    } else if (usage.unit() == csi::v1::VolumeUsage::INODES) {
      out.inodes = usage.total();
      out.inodes_free = usage.available();
      out.inodes_used = usage.used();
    }
  }
  out.abnormal = response.has_volume_condition() && response.volume_condition().abnormal();
  if (out.abnormal) {
    out.condition_message = response.volume_condition().message();
  }
  out.answered = true;
}

}  // namespace stagehand::csiclient
