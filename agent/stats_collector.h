#pragma once

// Gathers the stats and condition of every published volume from its driver, on a timer.

#include <chrono>
#include <thread>

#include "agent/metrics.h"
#include "standalone/csi_node_client.h"

namespace stagehand::reconciler {
class Reconciler;
}

namespace stagehand::agent {

// Calls NodeGetVolumeStats for every published target every `period` (±10 % jitter), at most
// `concurrency` calls at a time, and hands the samples to the collectable.
class StatsCollector {
 public:
  struct Options {
    std::chrono::milliseconds period{std::chrono::seconds(60)};
    int concurrency = 4;
    std::chrono::milliseconds call_timeout{std::chrono::seconds(10)};
  };

  // Each round also tells `reconciler` the condition of every volume it could ask about.
  StatsCollector(Options options, reconciler::Reconciler& reconciler,
                 standalone::RegistryDriverDirectory& drivers, AgentCollectable& sink);
  ~StatsCollector();
  StatsCollector(const StatsCollector&) = delete;
  StatsCollector& operator=(const StatsCollector&) = delete;

  // One round now (also used by the loop).
  void CollectOnce();

 private:
  Options options_;
  reconciler::Reconciler& reconciler_;
  standalone::RegistryDriverDirectory& drivers_;
  AgentCollectable& sink_;
  std::jthread loop_;
};

}  // namespace stagehand::agent
