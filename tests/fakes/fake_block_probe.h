#pragma once

// A scripted block probe: returns what the test set, per device; errors can be injected.

#include <map>
#include <string>

#include "mounter/block_probe.h"

namespace stagehand::testing {

class FakeBlockProbe : public mounter::BlockProbe {
 public:
  absl::StatusOr<mounter::ProbeResult> Probe(const std::string& device) override {
    if (!error_.ok()) {
      return error_;
    }
    auto it = results_.find(device);
    return it == results_.end() ? mounter::ProbeResult{} : it->second;
  }

  void Set(const std::string& device, mounter::ProbeResult r) { results_[device] = std::move(r); }

  void Fail(absl::Status s) { error_ = std::move(s); }

 private:
  std::map<std::string, mounter::ProbeResult> results_;
  absl::Status error_;
};

}  // namespace stagehand::testing
