#pragma once

// In-memory mounter: a mount table keyed by target. Honours the Mounter contract (idempotent
// mount/unmount, FailedPrecondition on a different mount) and can fail the next call.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mounter/mounter.h"

namespace stagehand::testing {

class FakeMounter : public mounter::Mounter {
 public:
  static mounter::MountInfo Entry(std::string source, std::string target, std::string fstype,
                                  std::string options) {
    mounter::MountInfo m;
    m.source = std::move(source);
    m.target = std::move(target);
    m.fstype = std::move(fstype);
    m.options = std::move(options);
    m.root = "/";
    return m;
  }

  absl::Status Mount(const mounter::MountRequest& req) override {
    SH_RETURN_IF_ERROR(TakeInjected());
    auto it = table_.find(req.target);
    if (it != table_.end()) {
      return it->second.source == req.source
                 ? absl::OkStatus()
                 : absl::FailedPreconditionError("target holds a different mount");
    }
    std::string options;
    for (const std::string& o : req.options) {
      options += (options.empty() ? "" : ",") + o;
    }
    table_[req.target] = Entry(req.source, req.target, req.fstype, options);
    ++mounts_;
    return absl::OkStatus();
  }

  absl::Status Bind(const std::string& source, const std::string& target, bool readonly,
                    const std::vector<std::string>&) override {
    SH_RETURN_IF_ERROR(TakeInjected());
    // A bind of a mounted directory shows the underlying device as its source.
    std::string shown = source;
    if (auto it = table_.find(source); it != table_.end()) {
      shown = it->second.source;
    }
    auto it = table_.find(target);
    if (it != table_.end()) {
      return it->second.source == shown ? absl::OkStatus()
                                        : absl::FailedPreconditionError("different mount");
    }
    table_[target] = Entry(shown, target, "bind", readonly ? "ro" : "rw");
    return absl::OkStatus();
  }

  absl::Status Unmount(const std::string& target) override {
    SH_RETURN_IF_ERROR(TakeInjected());
    table_.erase(target);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<mounter::MountInfo>> List() const override {
    std::vector<mounter::MountInfo> out;
    for (const auto& [target, info] : table_) {
      out.push_back(info);
    }
    return out;
  }

  absl::StatusOr<std::optional<mounter::MountInfo>> Find(const std::string& target) const override {
    auto it = table_.find(target);
    if (it == table_.end()) {
      return std::optional<mounter::MountInfo>();
    }
    return std::optional<mounter::MountInfo>(it->second);
  }

  void FailNext(absl::Status s) { injected_ = std::move(s); }

  bool IsMounted(const std::string& target) const { return table_.count(target) > 0; }

  int mounts() const { return mounts_; }

 private:
  absl::Status TakeInjected() { return std::exchange(injected_, absl::OkStatus()); }

  std::map<std::string, mounter::MountInfo> table_;
  absl::Status injected_;
  int mounts_ = 0;
};

}  // namespace stagehand::testing
