#include "status/stats_collector.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "base/log.h"
#include "reconciler/reconciler.h"

namespace stagehand::status {
namespace {

constexpr LogComponent kComponent = LogComponent::kMetrics;

}  // namespace

StatsCollector::StatsCollector(Options options, reconciler::Reconciler& reconciler,
                               csiclient::RegistryDriverDirectory& drivers, AgentCollectable& sink,
                               EventLoop* loop)
    : options_(options),
      reconciler_(reconciler),
      drivers_(drivers),
      sink_(sink),
      random_(std::random_device{}()),
      // A round's thread leaves right after it: rounds are seconds apart.
      rounds_(std::make_unique<TaskRunner>("sh-stats", std::chrono::milliseconds(20))) {
  if (loop == nullptr) {
    own_loop_ = std::make_unique<LoopThread>();
    loop = &own_loop_->loop();
  }
  stats_timer_ = std::make_unique<LoopTimer>(*loop, [this] {
    rounds_->Post([this] {
      CollectOnce();
      stats_timer_->ScheduleAfter(Jittered(options_.period));
    });
  });
  health_timer_ = std::make_unique<LoopTimer>(*loop, [this] {
    rounds_->Post([this] {
      CheckHealthOnce();
      health_timer_->ScheduleAfter(options_.health_period);
    });
  });
  // The first stats round soon after start, then every period.
  stats_timer_->ScheduleAfter(Jittered(std::chrono::seconds(2)));
  if (options_.health_period.count() > 0) {
    health_timer_->ScheduleAfter(options_.health_period);
  }
}

std::chrono::milliseconds StatsCollector::Jittered(std::chrono::milliseconds period) {
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  return std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(period.count()) * jitter(random_)));
}

void StatsCollector::CheckHealthOnce() {
  std::set<std::string> skipped;  // Drivers that do not answer health, or did not in time.
  std::vector<csiclient::VolumeHealthSample> samples;
  for (const auto& v : reconciler_.Status().volumes) {
    if (v.stage_state != "staged" || skipped.contains(v.driver)) {
      continue;
    }
    auto client = drivers_.FindClient(v.driver);
    if (!client.ok() || !drivers_.AnswersVolumeHealth(v.driver)) {
      skipped.insert(v.driver);
      continue;
    }
    std::string publish_path;
    for (const auto& t : v.targets) {
      if (t.state == "published") {
        publish_path = t.target_path;
        break;
      }
    }
    auto problems = (*client)->GetVolumeHealth(v.volume_handle, v.staging_path, publish_path,
                                               options_.health_timeout);
    if (!problems.ok()) {
      Log(kComponent).debug("volume health of '{}': {}", v.name, problems.status());
      if (absl::IsDeadlineExceeded(problems.status())) {
        skipped.insert(v.driver);
      }
      continue;
    }
    reconciler_.ReportCondition(v.name, csiclient::DescribeProblems(*problems));
    samples.push_back({v.driver, v.name, *std::move(problems)});
  }
  sink_.SetVolumeHealth(std::move(samples));
}

StatsCollector::~StatsCollector() {
  stats_timer_->Close();
  health_timer_->Close();
  rounds_.reset();  // Waits for a round in progress; its timer is closed already.
}

void StatsCollector::CollectOnce() {
  std::vector<csiclient::VolumeStatsSample> work;
  std::vector<std::string> handles;
  for (const auto& v : reconciler_.Status().volumes) {
    for (const auto& t : v.targets) {
      if (t.state == "published") {
        csiclient::VolumeStatsSample s;
        s.driver = v.driver;
        s.volume = v.name;
        s.target = t.target_path;
        work.push_back(std::move(s));
        handles.push_back(v.volume_handle);
      }
    }
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < work.size(); i = next++) {
      auto client = drivers_.FindClient(work[i].driver);
      if (!client.ok()) {
        continue;
      }
      if (auto s =
              (*client)->GetVolumeStats(handles[i], work[i].target, options_.call_timeout, work[i]);
          !s.ok()) {
        Log(kComponent)
            .debug("volume stats of '{}' at '{}': {}", work[i].volume, work[i].target, s);
      }
    }
  };
  {
    std::vector<std::jthread> threads;  // Joined at the end of the block.
    const int n = std::min<int>(options_.concurrency, static_cast<int>(work.size()));
    for (int i = 0; i < n; ++i) {
      threads.emplace_back(worker);
    }
  }
  // A dead data path must show where people look (agent status, volumes), not only in the
  // stats: every volume with an answer gets its condition (abnormal if any target is).
  std::map<std::string, std::string> conditions;  // Volume -> abnormal message ("" healthy).
  const bool health_rounds = options_.health_period.count() > 0;
  for (const auto& s : work) {
    if (!s.answered || (health_rounds && drivers_.AnswersVolumeHealth(s.driver))) {
      continue;
    }
    auto it = conditions.try_emplace(s.volume, "").first;
    if (s.abnormal && it->second.empty()) {
      it->second =
          s.condition_message.empty() ? "the driver reports it abnormal" : s.condition_message;
    }
  }
  for (const auto& [volume, condition] : conditions) {
    reconciler_.ReportCondition(volume, condition);
  }
  sink_.SetVolumeStats(std::move(work));
}

}  // namespace stagehand::status
