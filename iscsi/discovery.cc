#include "iscsi/discovery.h"

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include <absl/strings/str_cat.h>

#include "iscsi/iscsi_handles.h"
#include "iscsi/libiscsi_step.h"

namespace stagehand::iscsi {
namespace {

struct Discovery {
  AsyncStep step;
  std::vector<DiscoveredTarget> targets;
};

void OnDiscovery(iscsi_context* ctx, int status, void* command_data, void* private_data) {
  auto* discovery = static_cast<Discovery*>(private_data);
  FinishAsyncStep(ctx, status, &discovery->step);
  if (status != SCSI_STATUS_GOOD) {
    return;
  }
  // The list is only valid during the callback.
  for (auto* a = static_cast<iscsi_discovery_address*>(command_data); a != nullptr; a = a->next) {
    DiscoveredTarget t;
    t.name = a->target_name != nullptr ? a->target_name : "";
    for (auto* p = a->portals; p != nullptr; p = p->next) {
      if (p->portal != nullptr) {
        t.portals.emplace_back(p->portal);
      }
    }
    discovery->targets.push_back(std::move(t));
  }
}

}  // namespace

absl::StatusOr<std::vector<DiscoveredTarget>> Discover(const Portal& portal,
                                                       const std::string& initiator_name,
                                                       const std::optional<ChapCredentials>& chap,
                                                       int timeout_seconds) {
  const std::string address = portal.ToString();
  IscsiContext ctx(iscsi_create_context(initiator_name.c_str()));
  if (!ctx) {
    return absl::ResourceExhaustedError("cannot create a libiscsi context");
  }
  iscsi_set_session_type(ctx.get(), ISCSI_SESSION_DISCOVERY);
  iscsi_set_timeout(ctx.get(), timeout_seconds);
  iscsi_set_tcp_syncnt(ctx.get(), 3);
  iscsi_set_noautoreconnect(ctx.get(), 1);
  if (chap) {
    if (iscsi_set_initiator_username_pwd(ctx.get(), chap->user.c_str(), chap->secret.c_str()) !=
        0) {
      return absl::InvalidArgumentError("discovery CHAP credentials rejected locally");
    }
    if (!chap->user_in.empty() && iscsi_set_target_username_pwd(ctx.get(), chap->user_in.c_str(),
                                                                chap->secret_in.c_str()) != 0) {
      return absl::InvalidArgumentError("mutual discovery CHAP credentials rejected locally");
    }
  }
  {
    AsyncStep step;
    SH_RETURN_IF_ERROR(
        RunAsyncStep(ctx.get(), absl::StrCat("connect to ", address), timeout_seconds, step,
                     iscsi_connect_async(ctx.get(), address.c_str(), OnAsyncStep, &step)));
  }
  {
    AsyncStep step;
    SH_RETURN_IF_ERROR(RunAsyncStep(ctx.get(), absl::StrCat("discovery login at ", address),
                                    timeout_seconds, step,
                                    iscsi_login_async(ctx.get(), OnAsyncStep, &step)));
  }
  Discovery discovery;
  SH_RETURN_IF_ERROR(RunAsyncStep(ctx.get(), absl::StrCat("SendTargets at ", address),
                                  timeout_seconds, discovery.step,
                                  iscsi_discovery_async(ctx.get(), OnDiscovery, &discovery)));
  {
    // Best effort: the answer is in; a target that drops the connection instead is fine.
    AsyncStep step;
    (void)RunAsyncStep(ctx.get(), "logout", timeout_seconds, step,
                       iscsi_logout_async(ctx.get(), OnAsyncStep, &step));
  }
  return std::move(discovery.targets);
}

}  // namespace stagehand::iscsi
