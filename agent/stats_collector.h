#pragma once

// Gathers the stats and condition of every published volume from its driver, on a timer, and
// the health of every staged volume from drivers that answer NodeGetVolumeHealth, on a shorter
// one.

#include <chrono>
#include <thread>

#include "agent/metrics.h"
#include "standalone/csi_node_client.h"

namespace stagehand::reconciler {
class Reconciler;
}

namespace stagehand::agent {

// Calls NodeGetVolumeStats for every published target every `period` (±10 % jitter), at most
// `concurrency` calls at a time, and hands the samples to the collectable. Every
// `health_period` it asks each driver that answers NodeGetVolumeHealth (CSI 1.13) about its
// staged volumes and tells the reconciler; those drivers' conditions then come from these rounds
// only (the stats rounds tell the reconciler the conditions of the other drivers' volumes).
class StatsCollector {
 public:
  struct Options {
    std::chrono::milliseconds period{std::chrono::seconds(60)};
    int concurrency = 4;
    std::chrono::milliseconds call_timeout{std::chrono::seconds(10)};
    std::chrono::milliseconds health_period{std::chrono::seconds(5)};  // 0: no health rounds.
    // A driver that does not answer in time is skipped for the rest of the round.
    std::chrono::milliseconds health_timeout{std::chrono::seconds(2)};
  };

  // Each round also tells `reconciler` the condition of every volume it could ask about.
  StatsCollector(Options options, reconciler::Reconciler& reconciler,
                 standalone::RegistryDriverDirectory& drivers, AgentCollectable& sink);
  ~StatsCollector();
  StatsCollector(const StatsCollector&) = delete;
  StatsCollector& operator=(const StatsCollector&) = delete;

  // One stats round now (also used by the loop).
  void CollectOnce();
  // One health round now (also used by the loop).
  void CheckHealthOnce();

 private:
  void Loop(const std::stop_token& token);

  Options options_;
  reconciler::Reconciler& reconciler_;
  standalone::RegistryDriverDirectory& drivers_;
  AgentCollectable& sink_;
  std::jthread loop_;
};

}  // namespace stagehand::agent
