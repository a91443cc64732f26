#include "status/agent_health.h"

#include <absl/strings/str_cat.h>

namespace stagehand::status {

bool IsFailingVolume(const reconciler::VolumeStatus& v) {
  return reconciler::IsFailing(v.phase) || !v.condition.empty();
}

VolumeCounts CountVolumes(const std::vector<reconciler::VolumeStatus>& volumes) {
  VolumeCounts counts;
  counts.total = static_cast<int>(volumes.size());
  for (const auto& v : volumes) {
    ++counts.by_phase[v.phase];
    counts.published += v.phase == reconciler::VolumePhase::kPublished ? 1 : 0;
    counts.failing += IsFailingVolume(v) ? 1 : 0;
  }
  return counts;
}

std::optional<std::string> AgentHealth::ManifestProblem() const {
  return sources_.manifest_problem ? sources_.manifest_problem() : std::nullopt;
}

absl::Status AgentHealth::Ready() const {
  if (auto problem = ManifestProblem(); problem) {
    return absl::UnavailableError(*problem);
  }
  if (sources_.reconciler != nullptr && !sources_.reconciler->Ready()) {
    return absl::UnavailableError("the first reconcile is not done yet");
  }
  if (sources_.registry != nullptr) {
    auto self = sources_.registry->Find(sources_.driver_name);
    if (!self || !self->healthy()) {
      return absl::UnavailableError(absl::StrCat("the built-in driver '", sources_.driver_name,
                                                 "' is not registered and healthy yet"));
    }
    return absl::OkStatus();
  }
  if (!sources_.kubelet_registers) {
    return absl::OkStatus();
  }
  const state::v1::RegistrarState registrar =
      sources_.registrar != nullptr ? sources_.registrar->Get() : state::v1::RegistrarState();
  if (!registrar.registered()) {
    return absl::UnavailableError(
        registrar.last_error().empty()
            ? "the kubelet has not registered the built-in driver yet"
            : absl::StrCat("registration rejected: ", registrar.last_error()));
  }
  return absl::OkStatus();
}

std::vector<std::string> AgentHealth::VolumeProblems() const {
  std::vector<std::string> out;
  if (sources_.reconciler == nullptr) {
    return sources_.driver_volume_problems ? sources_.driver_volume_problems() : out;
  }
  for (const auto& v : sources_.reconciler->Status().volumes) {
    if (reconciler::IsFailing(v.phase)) {
      out.push_back(
          absl::StrCat("volume '", v.name, "': ", v.last_error.empty() ? v.blocked : v.last_error));
    } else if (!v.condition.empty()) {
      out.push_back(absl::StrCat("volume '", v.name, "' is abnormal: ", v.condition));
    }
  }
  return out;
}

absl::Status AgentHealth::Live() const {
  if (sources_.reconciler != nullptr) {
    (void)sources_.reconciler->Generation();  // Takes the loop's lock.
  }
  return absl::OkStatus();
}

std::string AgentHealth::Summary() const {
  std::string out = "serving";
  if (sources_.reconciler != nullptr) {
    const VolumeCounts counts = CountVolumes(sources_.reconciler->Status().volumes);
    absl::StrAppend(&out, "; ", counts.total, " volumes, ", counts.published, " published, ",
                    counts.failing, " failing");
  }
  if (sources_.registry != nullptr) {
    int unhealthy = 0;
    const auto plugins = sources_.registry->List();
    for (const auto& p : plugins) {
      unhealthy += p.healthy() ? 0 : 1;
    }
    absl::StrAppend(&out, "; ", plugins.size(), " plugins, ", unhealthy, " unhealthy");
  }
  return out;
}

}  // namespace stagehand::status
