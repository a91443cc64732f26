#pragma once

// A scripted iSCSI transport: "attaches" LUNs as /dev/fakeN with a configurable identity, tracks
// what is attached, and can fail the next attach or report a session unhealthy.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <absl/strings/str_cat.h>

#include "transport/registry.h"

namespace stagehand::testing {

// Its records are of the userspace kind, so it goes by that name.
class FakeTransport : public transport::Transport {
 public:
  // A registry holding only this transport, as the node's default (what NodeService takes).
  transport::Registry& AsRegistry() {
    if (registry_.Names().empty()) {
      registry_.Add(*this);
      registry_.SetDefault(std::string(Name()));
    }
    return registry_;
  }

  std::string_view Name() const override { return "userspace"; }

  void Prepare(const transport::AttachRequest& request,
               state::v1::SessionRecord* session) override {
    session->mutable_userspace()->set_runtime_dir(request.runtime_dir);
  }

  absl::StatusOr<transport::Attachment> Attach(const transport::AttachRequest& request) override {
    ++attaches_;
    last_attach_key_ = request.reservation_key;
    if (!next_error_.ok()) {
      return std::exchange(next_error_, absl::OkStatus());
    }
    const auto& target = std::get<iscsi::TargetSpec>(request.target);
    transport::Attachment a;
    auto& record = *a.session.mutable_userspace();
    a.device = absl::StrCat("/dev/fake", attaches_);
    if (identity_set_) {
      a.identity = identity_;
    } else {
      // Each LUN number its own identity, like tgtd's.
      a.identity = iscsi::LunIdentity{{absl::StrCat("naa.60000000000000000e0000000001",
                                                    absl::Hex(target.lun, absl::kZeroPad4))},
                                      absl::StrCat("beaf1", target.lun),
                                      "IET",
                                      "X"};
    }
    record.set_pid(1000 + attaches_);
    record.set_runtime_dir(request.runtime_dir);
    if (request.vet_identity) {
      // Nothing made yet: nothing to undo.
      SH_RETURN_IF_ERROR(request.vet_identity(a.identity, a.session));
    }
    if (after_vet_) {
      after_vet_();  // E.g. what a crash here would leave on disk.
    }
    a.capacity = {2048, 512};
    record.set_loop_device(a.device);
    attached_.insert(a.device);
    return a;
  }

  absl::Status Detach(const state::v1::SessionRecord& session) override {
    ++detaches_;
    attached_.erase(session.userspace().loop_device());
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> RefreshCapacity(const state::v1::SessionRecord& session) override {
    if (attached_.count(session.userspace().loop_device()) == 0) {
      return absl::UnavailableError("iSCSI session process is not running");
    }
    if (!next_refresh_error_.ok()) {
      return std::exchange(next_refresh_error_, absl::OkStatus());
    }
    return capacity_bytes_;
  }

  transport::SessionHealth Health(const state::v1::SessionRecord& session) override {
    transport::SessionHealth h;
    if (!healthy_ || attached_.count(session.userspace().loop_device()) == 0) {
      h.message = "iSCSI session process is not running";
      h.reason = health::Reason::kSessionGone;
    }
    return h;
  }

  // Remembers the writer's key per device; a record that changed moves its generation.
  absl::StatusOr<transport::WriterChange> SetWriter(
      const state::v1::SessionRecord& session, const transport::AttachRequest& request) override {
    ++writer_changes_;
    if (!next_writer_error_.ok()) {
      return std::exchange(next_writer_error_, absl::OkStatus());
    }
    transport::WriterChange change;
    change.session = session;
    const std::string& device = session.userspace().loop_device();
    const uint64_t held = writers_.contains(device) ? writers_[device] : 0;
    if ((request.reservation_key != 0) != (held != 0)) {
      writers_[device] = request.reservation_key;
      auto& record = *change.session.mutable_userspace();
      record.set_generation(record.generation() + 1);
    }
    return change;
  }

  // The key the writer of `device` holds; 0: none.
  uint64_t WriterKey(const std::string& device) const {
    auto it = writers_.find(device);
    return it == writers_.end() ? 0 : it->second;
  }

  void FailNextWriterChange(absl::Status s) { next_writer_error_ = std::move(s); }

  int writer_changes() const { return writer_changes_; }

  uint64_t last_attach_key() const { return last_attach_key_; }

  void FailNextAttach(absl::Status s) { next_error_ = std::move(s); }

  void FailNextRefresh(absl::Status s) { next_refresh_error_ = std::move(s); }

  void SetIdentity(iscsi::LunIdentity id) {
    identity_ = std::move(id);
    identity_set_ = true;
  }

  void SetHealthy(bool healthy) { healthy_ = healthy; }

  void SetAfterVet(std::function<void()> f) { after_vet_ = std::move(f); }

  void SetCapacity(uint64_t bytes) { capacity_bytes_ = bytes; }

  int attaches() const { return attaches_; }

  int detaches() const { return detaches_; }

  size_t attached() const { return attached_.size(); }

 private:
  absl::Status next_error_;
  absl::Status next_refresh_error_;
  iscsi::LunIdentity identity_;
  bool identity_set_ = false;
  std::function<void()> after_vet_;
  bool healthy_ = true;
  uint64_t capacity_bytes_ = uint64_t{2048} * 512;
  int attaches_ = 0;
  int detaches_ = 0;
  uint64_t last_attach_key_ = 0;
  absl::Status next_writer_error_;
  std::map<std::string, uint64_t> writers_;
  int writer_changes_ = 0;
  std::set<std::string> attached_;
  transport::Registry registry_;
};

}  // namespace stagehand::testing
