#include "registration/registrar_record.h"

#include <spdlog/spdlog.h>

#include "base/log.h"
#include "registration/registry_files.h"

namespace stagehand::registration {
namespace {

constexpr LogComponent kComponent = LogComponent::kRegistration;

}  // namespace

state::v1::RegistrarState RegistrarRecord::Get() const {
  MutexLock lock(mu_);
  return state_;
}

void RegistrarRecord::Record(const registration::RegistrarStatus& status, bool initial) {
  state::v1::RegistrarState record;
  record.set_socket_path(status.socket_path);
  record.set_endpoint(endpoint_);
  record.set_notified(status.notified);
  record.set_registered(status.registered);
  record.set_last_error(status.last_error);
  record.set_rejections(status.rejections);
  // The file is written under the lock too, so that it never goes back to an older state.
  MutexLock lock(mu_);
  if (initial && recorded_) {
    return;
  }
  recorded_ = true;
  state_ = record;
  if (auto s = registration::WriteJsonFile(file_, record); !s.ok()) {
    Log(kComponent).warn("cannot write '{}': {}", file_, s);
  }
}

}  // namespace stagehand::registration
