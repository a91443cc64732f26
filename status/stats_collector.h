#pragma once

// Gathers the stats and condition of every published volume from its driver, on a timer, and
// the health of every staged volume from drivers that answer NodeGetVolumeHealth, on a shorter
// one.

#include <chrono>
#include <memory>
#include <random>

#include "base/event_loop.h"
#include "base/task_runner.h"
#include "csiclient/reconciler_client.h"
#include "status/metrics.h"

namespace stagehand::reconciler {
class Reconciler;
}

namespace stagehand::status {

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

  // Each round also tells `reconciler` the condition of every volume it could ask about. The
  // timers run on `loop` (a thread of the collector's own when null), the rounds on a thread
  // that exists only while one runs. The references must outlive the collector.
  StatsCollector(Options options, reconciler::Reconciler& reconciler,
                 csiclient::RegistryDriverDirectory& drivers, AgentCollectable& sink,
                 EventLoop* loop = nullptr);
  ~StatsCollector();
  StatsCollector(const StatsCollector&) = delete;
  StatsCollector& operator=(const StatsCollector&) = delete;

  // One stats round now (also what the timer runs).
  void CollectOnce();
  // One health round now (also what the timer runs).
  void CheckHealthOnce();

 private:
  // The period with ±10 % jitter (the runner's).
  std::chrono::milliseconds Jittered(std::chrono::milliseconds period);

  Options options_;
  reconciler::Reconciler& reconciler_;
  csiclient::RegistryDriverDirectory& drivers_;
  AgentCollectable& sink_;
  std::mt19937_64 random_;
  std::unique_ptr<LoopThread> own_loop_;  // When given no loop.
  // Declared in this order so that the timers are closed before the runner joins a round.
  std::unique_ptr<TaskRunner> rounds_;
  std::unique_ptr<LoopTimer> stats_timer_;
  std::unique_ptr<LoopTimer> health_timer_;
};

}  // namespace stagehand::status
