#include "transport/registry.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "transport/session_record.h"

namespace stagehand::transport {

void Registry::Add(Transport& transport) {
  usable_[std::string(transport.Name())] = &transport;
}

void Registry::AddUnavailable(std::string name, std::string why) {
  unusable_[std::move(name)] = std::move(why);
}

void Registry::SetDefault(std::string name) {
  default_ = std::move(name);
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : usable_) {
    names.push_back(name);
  }
  for (const auto& [name, why] : unusable_) {
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> Registry::Chosen(
    const std::map<std::string, std::string>& context) const {
  auto it = context.find(kTransportKey);
  if (it == context.end() || it->second.empty()) {
    return std::string();
  }
  if (!usable_.contains(it->second) && !unusable_.contains(it->second)) {
    return absl::InvalidArgumentError(absl::StrCat("'", kTransportKey, "' value '", it->second,
                                                   "' is not a transport (",
                                                   absl::StrJoin(Names(), ", "), ")"));
  }
  return it->second;
}

absl::StatusOr<Transport*> Registry::Find(std::string_view name) const {
  if (auto it = usable_.find(name); it != usable_.end()) {
    return it->second;
  }
  if (auto it = unusable_.find(name); it != unusable_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", std::string(name), " transport is not available on this node: ", it->second));
  }
  return absl::InvalidArgumentError(absl::StrCat("no transport is named '", std::string(name),
                                                 "' (", absl::StrJoin(Names(), ", "), ")"));
}

absl::StatusOr<Transport*> Registry::For(const state::v1::SessionRecord& session) const {
  return Find(TransportOf(session));
}

void Registry::Prepare(const AttachRequest& request, state::v1::SessionRecord* session) {
  // An unusable transport prepares nothing: its Attach fails before any side effect.
  if (auto t = Find(request.transport.empty() ? default_ : request.transport); t.ok()) {
    (*t)->Prepare(request, session);
  }
}

absl::StatusOr<Attachment> Registry::Attach(const AttachRequest& request) {
  SH_ASSIGN_OR_RETURN(Transport * t,
                      Find(request.transport.empty() ? default_ : request.transport));
  return t->Attach(request);
}

absl::Status Registry::Detach(const state::v1::SessionRecord& session) {
  if (session.kind_case() == state::v1::SessionRecord::KIND_NOT_SET) {
    return absl::OkStatus();  // An attach that never got as far as a record: nothing to undo.
  }
  SH_ASSIGN_OR_RETURN(Transport * t, For(session));
  return t->Detach(session);
}

absl::StatusOr<uint64_t> Registry::RefreshCapacity(const state::v1::SessionRecord& session) {
  SH_ASSIGN_OR_RETURN(Transport * t, For(session));
  return t->RefreshCapacity(session);
}

SessionHealth Registry::Health(const state::v1::SessionRecord& session) {
  auto t = For(session);
  if (!t.ok()) {
    SessionHealth h;
    h.message = std::string(t.status().message());
    h.reason = health::Reason::kSessionDown;
    return h;
  }
  return (*t)->Health(session);
}

SessionDescription Registry::Describe(const state::v1::SessionRecord& session) {
  auto t = For(session);
  return t.ok() ? (*t)->Describe(session) : SessionDescription{};
}

absl::Status Registry::Resume(const state::v1::SessionRecord& session) {
  SH_ASSIGN_OR_RETURN(Transport * t, For(session));
  return t->Resume(session);
}

absl::StatusOr<std::optional<state::v1::SessionRecord>> Registry::Upgrade(
    const state::v1::SessionRecord& session) {
  SH_ASSIGN_OR_RETURN(Transport * t, For(session));
  return t->Upgrade(session);
}

absl::StatusOr<WriterChange> Registry::SetWriter(const state::v1::SessionRecord& session,
                                                 const AttachRequest& request) {
  SH_ASSIGN_OR_RETURN(Transport * t, For(session));
  return t->SetWriter(session, request);
}

std::vector<SessionSample> Registry::Sessions() {
  std::vector<SessionSample> all;
  for (const auto& [name, t] : usable_) {
    for (SessionSample& s : t->Sessions()) {
      all.push_back(std::move(s));
    }
  }
  return all;
}

}  // namespace stagehand::transport
