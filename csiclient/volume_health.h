#pragma once

// What drivers answer about their volumes, as the agent keeps it: the problems of a
// NodeGetVolumeHealth answer and the samples of NodeGetVolumeStats, for the reconciler's
// conditions, metrics and the agent API.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/csi.pb.h"

namespace stagehand::csiclient {

// One entry of a NodeGetVolumeHealth answer.
struct VolumeHealthProblem {
  std::string status;  // "DEGRADED", "INACCESSIBLE", "DATA_LOSS".
  std::string reason;  // CamelCase; the status when the driver gave none.
  std::string message;
  // Whether it goes away by itself, for the reasons stagehand's own driver gives
  // (health/reason.h); nullopt for another driver's.
  std::optional<bool> heals;
};

// The entries of a NodeGetVolumeHealth answer.
std::vector<VolumeHealthProblem> ProblemsOf(const csi::v1::VolumeHealth& health);

// "Reason: message; Reason: message" (the condition people read); empty for no problems.
std::string DescribeProblems(const std::vector<VolumeHealthProblem>& problems);

// One volume's problems as the last health round found them (metrics).
struct VolumeHealthSample {
  std::string driver;
  std::string volume;
  std::vector<VolumeHealthProblem> problems;
};

// One volume target's answer to NodeGetVolumeStats.
struct VolumeStatsSample {
  std::string driver;
  std::string volume;
  std::string target;
  int64_t capacity_bytes = -1;  // -1: not reported.
  int64_t available_bytes = -1;
  int64_t used_bytes = -1;
  int64_t inodes = -1;
  int64_t inodes_free = -1;
  int64_t inodes_used = -1;
  bool abnormal = false;
  std::string condition_message;  // The driver's volume condition message, when abnormal.
  bool answered = false;          // NodeGetVolumeStats succeeded (the fields above are real).
};

// Fills the usage and condition of `response` into `out` and marks it answered.
void FillStats(const csi::v1::NodeGetVolumeStatsResponse& response, VolumeStatsSample& out);

}  // namespace stagehand::csiclient
