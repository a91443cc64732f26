#include "health/reason.h"

#include <array>

namespace stagehand::health {
namespace {

using enum Severity;
constexpr auto kNoStorage = StorageClass::kNone;
constexpr auto kUnreachable = StorageClass::kUnreachable;

// In the order of the enum (checked below).
constexpr std::array<ReasonInfo, 21> kReasons = {{
    {Reason::kSessionReconnecting, "SessionReconnecting", kInaccessible, true, kUnreachable, false},
    {Reason::kReplacementTimeoutPassed, "ReplacementTimeoutPassed", kInaccessible, true,
     kUnreachable, false},
    {Reason::kSessionRestarting, "SessionRestarting", kInaccessible, true, kNoStorage, true},
    {Reason::kSessionStopped, "SessionStopped", kInaccessible, true, kNoStorage, false},
    {Reason::kSessionNotAnswering, "SessionNotAnswering", kInaccessible, true, kNoStorage, false},
    {Reason::kSessionGone, "SessionGone", kInaccessible, false, kNoStorage, false},
    {Reason::kSessionDown, "SessionDown", kInaccessible, false, kUnreachable, false},
    {Reason::kLoopDeviceGone, "LoopDeviceGone", kInaccessible, false, kNoStorage, false},
    {Reason::kLoopDeviceDetaching, "LoopDeviceDetaching", kDegraded, false, kNoStorage, false},
    {Reason::kFuseConnectionAborted, "FuseConnectionAborted", kInaccessible, false, kNoStorage,
     false},
    {Reason::kLunIdentityChanged, "LunIdentityChanged", kInaccessible, false, kNoStorage, false},
    {Reason::kLunCapacityShrunk, "LunCapacityShrunk", kInaccessible, false, kNoStorage, false},
    {Reason::kStagingMountMissing, "StagingMountMissing", kInaccessible, false, kNoStorage, false},
    {Reason::kPublishMountMissing, "PublishMountMissing", kInaccessible, false, kNoStorage, false},
    {Reason::kFilesystemFailed, "FilesystemFailed", kInaccessible, false, kNoStorage, false},
    {Reason::kFilesystemErrors, "FilesystemErrors", kDegraded, false, kNoStorage, false},
    {Reason::kMultipathDegraded, "MultipathDegraded", kDegraded, true, StorageClass::kDegraded,
     false},
    {Reason::kSessionUnsupervised, "SessionUnsupervised", kDegraded, true, kNoStorage, true},
    {Reason::kFuseRequestsLost, "FuseRequestsLost", kInaccessible, false, kNoStorage, false},
    {Reason::kFenced, "Fenced", kInaccessible, false, kNoStorage, false},
    {Reason::kUnreserved, "Unreserved", kDegraded, false, kNoStorage, false},
}};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < kReasons.size(); ++i) {
    if (static_cast<size_t>(kReasons[i].reason) != i) {
      return false;
    }
  }
  return static_cast<size_t>(Reason::kUnreserved) + 1 == kReasons.size();
}

static_assert(InEnumOrder(), "kReasons must list every Reason once, in the order of the enum");

}  // namespace

std::span<const ReasonInfo> AllReasons() {
  return kReasons;
}

const ReasonInfo& Info(Reason reason) {
  return kReasons[static_cast<size_t>(reason)];
}

std::optional<Reason> ReasonNamed(std::string_view name) {
  for (const ReasonInfo& info : kReasons) {
    if (info.name == name) {
      return info.reason;
    }
  }
  return std::nullopt;
}

std::string_view StorageReasonName(StorageClass storage) {
  switch (storage) {
    case StorageClass::kUnreachable:
      return "TargetUnreachable";
    case StorageClass::kDegraded:
      return "PathsDegraded";
    case StorageClass::kNone:
      break;
  }
  return "";
}

std::string_view SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kDegraded:
      return "DEGRADED";
    case Severity::kInaccessible:
      return "INACCESSIBLE";
    case Severity::kDataLoss:
      return "DATA_LOSS";
  }
  return "";
}

}  // namespace stagehand::health
