#pragma once

// The node's transports behind one Transport: a volume goes to the kernel or the userspace
// transport as its volume_context `transport` asks, else to the node's default; its session
// record remembers which, so detach, health and resize go to the same one (also after a restart).

#include <string>

#include "transport/transport.h"

namespace stagehand::transport {

class TransportSet : public Transport {
 public:
  // `kernel` may be null (no kernel initiator here); `kernel_unavailable` then says why.
  // `default_transport`: kTransportKernel or kTransportUserspace.
  TransportSet(Transport& userspace, Transport* kernel, std::string default_transport,
               std::string kernel_unavailable);

  const std::string& default_transport() const { return default_; }

  void Prepare(const AttachRequest& request, state::v1::SessionRecord* session) override;
  absl::StatusOr<Attachment> Attach(const AttachRequest& request) override;
  absl::Status Detach(const state::v1::SessionRecord& session) override;
  absl::StatusOr<uint64_t> RefreshCapacity(const state::v1::SessionRecord& session) override;
  SessionHealth Health(const state::v1::SessionRecord& session) override;
  SessionDescription Describe(const state::v1::SessionRecord& session) override;
  absl::StatusOr<std::optional<state::v1::SessionRecord>> Upgrade(
      const state::v1::SessionRecord& session) override;

 private:
  absl::StatusOr<Transport*> Pick(std::string_view name);

  Transport& userspace_;
  Transport* kernel_;
  std::string default_;
  std::string kernel_unavailable_;
};

}  // namespace stagehand::transport
