#pragma once

// How the agent stands, defined once for everything that reports it: systemd's STATUS= line and
// watchdog, the agent API's GetStatus (counts, ready), the stagehand_volumes metric, /readyz and
// /healthz.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "reconciler/reconciler.h"
#include "reconciler/volume_phase.h"
#include "registration/registrar_record.h"
#include "registration/registry.h"

namespace stagehand::status {

struct VolumeCounts {
  int total = 0;
  int published = 0;
  // Needs someone to act: failing or blocked (IsFailing), or reported abnormal by its driver
  // (VolumeStatus::condition).
  int failing = 0;
  std::map<reconciler::VolumePhase, int> by_phase;
};

// A volume counts as failing in VolumeCounts.
bool IsFailingVolume(const reconciler::VolumeStatus& v);

VolumeCounts CountVolumes(const std::vector<reconciler::VolumeStatus>& volumes);

// Thread-safe; reads its sources on every call (they are thread-safe), which must outlive it.
class AgentHealth {
 public:
  struct Sources {
    std::string driver_name;  // The built-in driver.
    // Standalone (stagehand watches plugins and reconciles); null in Kubernetes mode.
    const reconciler::Reconciler* reconciler = nullptr;
    const registration::Registry* registry = nullptr;
    // Always set: what the registering side told the built-in driver's registrar.
    const registration::RegistrarRecord* registrar = nullptr;
    // Kubernetes mode: the kubelet must register the driver before the agent is ready. A
    // standalone agent that watches no plugins (serving a driver into another's directory) is
    // ready without it; its registration shows in the agent API.
    bool kubelet_registers = false;
    // Without a reconciler: one line per abnormal volume of the built-in driver (may be empty).
    std::function<std::vector<std::string>()> driver_volume_problems;
    // Why the manifest directory's state is unknown, if it is (manifests::ManifestSource).
    std::function<std::optional<std::string>()> manifest_problem;
  };

  explicit AgentHealth(Sources sources) : sources_(std::move(sources)) {}

  // Ready to serve its purpose (/readyz, AgentStatus.ready): standalone, the manifest directory
  // is readable, the first reconcile is done and the built-in driver is registered and healthy
  // in stagehand's own registry; in Kubernetes mode, the kubelet registered the driver; a
  // standalone agent that watches no plugins, once it serves.
  // Unavailable with the first reason otherwise.
  absl::Status Ready() const;

  // Alive (/healthz, the systemd watchdog): hangs rather than answer if the reconciler's lock
  // is stuck, so the probe times out and the watchdog fires.
  absl::Status Live() const;

  // One line per volume that needs someone to act: failing, blocked or abnormal ("volume 'v1'
  // is abnormal: SessionGone: ..."). /readyz lists them under its answer: a broken volume does
  // not make the agent unready (it still serves every other volume and the repairs).
  std::vector<std::string> VolumeProblems() const;

  // One line for `systemctl status`, e.g. "serving; 3 volumes, 2 published, 1 failing; ...".
  std::string Summary() const;

  // Why the manifest directory's state is unknown, if it is.
  std::optional<std::string> ManifestProblem() const;

  const Sources& sources() const { return sources_; }

 private:
  const Sources sources_;
};

}  // namespace stagehand::status
