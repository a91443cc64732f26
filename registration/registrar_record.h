#pragma once

// What the registering side (the kubelet, or stagehand's own plugin watcher) last told the
// built-in driver's registrar: kept for the agent API and /readyz, and written to a file
// (<state-dir>/registrar.json) for operators. Thread-safe.

#include <string>

#include "base/mutex.h"
#include "proto/state.pb.h"
#include "registration/registrar.h"

namespace stagehand::registration {

class RegistrarRecord {
 public:
  // `endpoint`: the CSI socket path the registration socket advertises.
  RegistrarRecord(std::string file, std::string endpoint)
      : file_(std::move(file)), endpoint_(std::move(endpoint)) {}

  // After every NotifyRegistrationStatus (the registrar's listener).
  void Update(const registration::RegistrarStatus& status) { Record(status, /*initial=*/false); }

  // The state right after the registrar started. Does not overwrite what an Update (from a
  // NotifyRegistrationStatus that came in first) already recorded.
  void Initial(const registration::RegistrarStatus& status) { Record(status, /*initial=*/true); }

  state::v1::RegistrarState Get() const;

 private:
  void Record(const registration::RegistrarStatus& status, bool initial);

  const std::string file_;
  const std::string endpoint_;
  mutable Mutex mu_;
  state::v1::RegistrarState state_ ABSL_GUARDED_BY(mu_);
  bool recorded_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stagehand::registration
