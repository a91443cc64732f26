#include "transport/registry.h"

#include <absl/strings/str_cat.h>

namespace stagehand::transport {

TransportSet::TransportSet(Transport& userspace, Transport* kernel, std::string default_transport,
                           std::string kernel_unavailable)
    : userspace_(userspace),
      kernel_(kernel),
      default_(std::move(default_transport)),
      kernel_unavailable_(std::move(kernel_unavailable)) {}

absl::StatusOr<Transport*> TransportSet::Pick(std::string_view name) {
  if (name == iscsi::kTransportKernel) {
    if (kernel_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the kernel iSCSI transport is not available on this node: ", kernel_unavailable_));
    }
    return kernel_;
  }
  return &userspace_;  // "userspace", and "" in records written before there were two.
}

void TransportSet::Prepare(const AttachRequest& request, state::v1::SessionRecord* session) {
  const std::string name = request.target.transport.empty() ? default_ : request.target.transport;
  if (auto t = Pick(name); t.ok()) {
    (*t)->Prepare(request, session);
  }
  session->set_transport(name);
}

absl::StatusOr<Attachment> TransportSet::Attach(const AttachRequest& request) {
  const std::string name = request.target.transport.empty() ? default_ : request.target.transport;
  SH_ASSIGN_OR_RETURN(Transport * t, Pick(name));
  SH_ASSIGN_OR_RETURN(Attachment a, t->Attach(request));
  a.session.set_transport(name);
  return a;
}

absl::Status TransportSet::Detach(const state::v1::SessionRecord& session) {
  if (session.transport() == iscsi::kTransportKernel && kernel_ == nullptr &&
      session.paths().empty()) {
    return absl::OkStatus();  // A kernel attach that never started here: nothing to undo.
  }
  SH_ASSIGN_OR_RETURN(Transport * t, Pick(session.transport()));
  return t->Detach(session);
}

absl::StatusOr<uint64_t> TransportSet::RefreshCapacity(const state::v1::SessionRecord& session) {
  SH_ASSIGN_OR_RETURN(Transport * t, Pick(session.transport()));
  return t->RefreshCapacity(session);
}

SessionHealth TransportSet::Health(const state::v1::SessionRecord& session) {
  auto t = Pick(session.transport());
  if (!t.ok()) {
    return SessionHealth{false, false, std::string(t.status().message()), "SessionDown"};
  }
  return (*t)->Health(session);
}

SessionDescription TransportSet::Describe(const state::v1::SessionRecord& session) {
  auto t = Pick(session.transport());
  return t.ok() ? (*t)->Describe(session) : SessionDescription{};
}

absl::StatusOr<std::optional<state::v1::SessionRecord>> TransportSet::Upgrade(
    const state::v1::SessionRecord& session) {
  SH_ASSIGN_OR_RETURN(Transport * t, Pick(session.transport()));
  return t->Upgrade(session);
}

}  // namespace stagehand::transport
