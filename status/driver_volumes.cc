#include "status/driver_volumes.h"

#include <map>

#include <absl/strings/str_cat.h>

#include "transport/session_record.h"

namespace stagehand::status {
namespace {

using driver::StagedVolume;
using Phase = StagedVolume::Phase;

const char* PhaseOf(const StagedVolume& volume) {
  switch (volume.phase) {
    case Phase::kStaged:
      return volume.publications.empty() ? "staged" : "published";
    case Phase::kStaging:
      return "staging";
    case Phase::kUnstaging:
      return "unstaging";
  }
  return "uncertain";
}

// The volume's health problems (none when it is not staged), or why they are unknown.
absl::StatusOr<std::vector<csiclient::VolumeHealthProblem>> ProblemsOfVolume(
    driver::NodeService& node, const StagedVolume& volume) {
  if (volume.phase != Phase::kStaged) {
    return std::vector<csiclient::VolumeHealthProblem>{};
  }
  csi::v1::NodeGetVolumeHealthRequest request;
  request.set_volume_id(volume.volume_id);
  csi::v1::NodeGetVolumeHealthResponse response;
  SH_RETURN_IF_ERROR(node.Health(request, &response));
  return csiclient::ProblemsOf(response.volume_health());
}

// "Reason: message; ..." of the volume's health, empty when it is healthy or not staged.
std::string ConditionOf(driver::NodeService& node, const StagedVolume& volume) {
  auto problems = ProblemsOfVolume(node, volume);
  if (!problems.ok()) {
    return absl::StrCat("health unknown: ", problems.status().message());
  }
  return csiclient::DescribeProblems(*problems);
}

void FillDataPath(driver::NodeService& node, const StagedVolume& volume, agent::v1::DataPath* out) {
  const transport::SessionDescription d = node.DescribeSession(volume);
  out->set_transport(transport::TransportOf(volume.session));
  out->set_pid(d.pid);
  out->set_build(d.build);
  out->set_outdated(d.outdated);
  out->set_fuse_mode(d.fuse_mode);
  out->set_io_flusher(d.io_flusher);
  out->set_xfs_nouuid(volume.xfs_nouuid);
  out->set_reservation_key(d.reservation_key);
  out->set_unreserved(d.unreserved);
}

}  // namespace

void AddDataPaths(driver::NodeService& node, const std::string& driver_name,
                  agent::v1::ListVolumesResponse* out) {
  std::map<std::string, StagedVolume> staged;
  for (StagedVolume& volume : node.Volumes(nullptr)) {
    staged.emplace(volume.volume_id, std::move(volume));
  }
  for (auto& v : *out->mutable_volumes()) {
    auto it = staged.find(v.volume_handle());
    if (v.driver() == driver_name && it != staged.end()) {
      FillDataPath(node, it->second, v.mutable_data_path());
    }
  }
}

void ListDriverVolumes(driver::NodeService& node, const std::string& driver_name,
                       agent::v1::ListVolumesResponse* out, std::vector<std::string>* problems) {
  out->set_generation(1);
  out->set_ready(true);
  std::vector<std::string> errors;
  for (const StagedVolume& volume : node.Volumes(&errors)) {
    auto* v = out->add_volumes();
    v->set_name(volume.volume_id);
    v->set_declared(true);  // The kubelet (or a CSI client) asked for it.
    v->set_driver(driver_name);
    v->set_volume_handle(volume.volume_id);
    v->set_staging_path(volume.staging_path);
    v->set_phase(PhaseOf(volume));
    v->set_stage_state(volume.phase == Phase::kStaged ? "staged" : "uncertain");
    for (const driver::Publication& p : volume.publications) {
      auto* t = v->add_targets();
      t->set_target_path(p.target_path);
      t->set_read_only(p.readonly);
      t->set_state("published");
    }
    v->set_condition(ConditionOf(node, volume));
    FillDataPath(node, volume, v->mutable_data_path());
    if (!v->condition().empty()) {
      problems->push_back(
          absl::StrCat("volume '", volume.volume_id, "' is abnormal: ", v->condition()));
    }
  }
  for (const auto& e : errors) {
    problems->push_back(absl::StrCat("unreadable volume record: ", e));
  }
}

std::vector<csiclient::VolumeHealthSample> DriverVolumeHealth(driver::NodeService& node,
                                                              const std::string& driver_name) {
  std::vector<csiclient::VolumeHealthSample> out;
  std::vector<std::string> unreadable;
  for (const StagedVolume& volume : node.Volumes(&unreadable)) {
    auto problems = ProblemsOfVolume(node, volume);
    if (problems.ok() && !problems->empty()) {
      out.push_back({driver_name, volume.volume_id, std::move(*problems)});
    }
  }
  return out;
}

}  // namespace stagehand::status
