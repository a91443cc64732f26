#pragma once

// The node's transports by name, behind one Transport: a volume goes to the transport its
// volume_context `transport` names, else to the node's default; its session record says which
// transport made it (its kind, transport/session_record.h), so detach, health, resize and
// upgrades go back to that one, also after a restart. A name no transport has is refused; a
// transport this node cannot use (no kernel initiator) is known by name and refused with why.
//
// Set up before use (Add, AddUnavailable, SetDefault), then thread-safe as far as the
// transports are: it keeps no state of its own that changes.

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "transport/transport.h"

namespace stagehand::transport {

// Volume-context key that picks a transport.
inline constexpr char kTransportKey[] = "transport";

class Registry final : public Transport {
 public:
  // `transport` must outlive the registry; it is known by its Name().
  void Add(Transport& transport);
  // A transport this node cannot use; a volume that asks for it gets FailedPrecondition with
  // `why`.
  void AddUnavailable(std::string name, std::string why);
  // REQUIRES: `name` was added with Add.
  void SetDefault(std::string name);

  const std::string& default_name() const { return default_; }

  // Every name, usable or not, sorted.
  std::vector<std::string> Names() const;

  // The transport `context` asks for ("" when it names none: the default). InvalidArgument,
  // naming the known transports, for a name no transport has. Pure: no side effect.
  absl::StatusOr<std::string> Chosen(const std::map<std::string, std::string>& context) const;

  std::string_view Name() const override { return default_; }

  void Prepare(const AttachRequest& request, state::v1::SessionRecord* session) override;
  absl::StatusOr<Attachment> Attach(const AttachRequest& request) override;
  absl::Status Detach(const state::v1::SessionRecord& session) override;
  absl::StatusOr<uint64_t> RefreshCapacity(const state::v1::SessionRecord& session) override;
  SessionHealth Health(const state::v1::SessionRecord& session) override;
  SessionDescription Describe(const state::v1::SessionRecord& session) override;
  absl::Status Resume(const state::v1::SessionRecord& session) override;
  absl::StatusOr<std::optional<state::v1::SessionRecord>> Upgrade(
      const state::v1::SessionRecord& session) override;
  absl::StatusOr<WriterChange> SetWriter(const state::v1::SessionRecord& session,
                                         const AttachRequest& request) override;
  std::vector<SessionSample> Sessions() override;

 private:
  // InvalidArgument for an unknown name, FailedPrecondition for an unusable one.
  absl::StatusOr<Transport*> Find(std::string_view name) const;
  absl::StatusOr<Transport*> For(const state::v1::SessionRecord& session) const;

  std::map<std::string, Transport*, std::less<>> usable_;
  std::map<std::string, std::string, std::less<>> unusable_;  // Name -> why.
  std::string default_;
};

}  // namespace stagehand::transport
