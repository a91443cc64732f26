#pragma once

// In-memory stand-ins for the reconciler's seams: a CSI driver that remembers what is staged and
// published (and fails on request), a driver directory, a record store and a mount table.

#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "reconciler/actual_state.h"
#include "reconciler/node_client.h"

namespace stagehand::testing {

// Thread-safe. Staging/publishing also "mounts" the path in `mounts` when given.
class FakeNodeClient final : public reconciler::NodeClient {
 public:
  struct Call {
    std::string method;  // "stage", "unstage", "publish", "unpublish".
    std::string path;    // Staging or target path.
  };

  explicit FakeNodeClient(std::set<std::string>* mounts = nullptr, std::mutex* mounts_mu = nullptr)
      : mounts_(mounts), mounts_mu_(mounts_mu) {}

  absl::Status Stage(const reconciler::StageCall& call, std::chrono::milliseconds) override {
    return Do("stage", call.staging_path, true);
  }

  absl::Status Unstage(const std::string&, const std::string& staging_path,
                       std::chrono::milliseconds) override {
    return Do("unstage", staging_path, false);
  }

  absl::Status Publish(const reconciler::PublishCall& call, std::chrono::milliseconds) override {
    {
      std::lock_guard lock(mu_);
      if (!staged_.contains(call.staging_path)) {
        calls_.push_back({"publish", call.target_path});
        return absl::FailedPreconditionError("not staged");
      }
    }
    return Do("publish", call.target_path, true);
  }

  absl::Status Unpublish(const std::string&, const std::string& target_path,
                         std::chrono::milliseconds) override {
    return Do("unpublish", target_path, false);
  }

  // The next call of `method` fails with `status`; with `effect`, the call still takes effect
  // (as when a reply is lost).
  void FailNext(const std::string& method, absl::Status status, bool effect = false) {
    std::lock_guard lock(mu_);
    failures_[method].push_back({std::move(status), effect});
  }

  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }

  std::set<std::string> staged() const {
    std::lock_guard lock(mu_);
    return staged_;
  }

  std::set<std::string> published() const {
    std::lock_guard lock(mu_);
    return published_;
  }

 private:
  struct Failure {
    absl::Status status;
    bool effect;
  };

  absl::Status Do(const std::string& method, const std::string& path, bool add) {
    std::lock_guard lock(mu_);
    calls_.push_back({method, path});
    absl::Status result;
    bool effect = true;
    if (auto& queue = failures_[method]; !queue.empty()) {
      result = queue.front().status;
      effect = queue.front().effect;
      queue.pop_front();
    }
    if (effect) {
      auto& set = (method == "stage" || method == "unstage") ? staged_ : published_;
      add ? (void)set.insert(path) : (void)set.erase(path);
      if (mounts_ != nullptr) {
        std::lock_guard mounts_lock(*mounts_mu_);
        add ? (void)mounts_->insert(path) : (void)mounts_->erase(path);
      }
    }
    return result;
  }

  mutable std::mutex mu_;
  std::set<std::string>* mounts_;
  std::mutex* mounts_mu_;
  std::vector<Call> calls_;
  std::set<std::string> staged_;
  std::set<std::string> published_;
  std::map<std::string, std::deque<Failure>> failures_;
};

class FakeDriverDirectory final : public reconciler::DriverDirectory {
 public:
  void Set(const std::string& name, std::shared_ptr<reconciler::NodeClient> client) {
    std::lock_guard lock(mu_);
    drivers_[name] = std::move(client);
  }

  void Remove(const std::string& name) {
    std::lock_guard lock(mu_);
    drivers_.erase(name);
  }

  absl::StatusOr<std::shared_ptr<reconciler::NodeClient>> Find(const std::string& name) override {
    std::lock_guard lock(mu_);
    auto it = drivers_.find(name);
    if (it == drivers_.end()) {
      return absl::FailedPreconditionError("driver '" + name + "' is not registered");
    }
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<reconciler::NodeClient>> drivers_;
};

class MemoryActualStore final : public reconciler::ActualStore {
 public:
  std::vector<reconciler::ActualVolume> List(std::vector<std::string>&) override {
    std::lock_guard lock(mu_);
    std::vector<reconciler::ActualVolume> out;
    for (const auto& [name, v] : records_) {
      out.push_back(v);
    }
    return out;
  }

  absl::Status Save(const reconciler::ActualVolume& volume) override {
    std::lock_guard lock(mu_);
    records_[volume.name] = volume;
    return absl::OkStatus();
  }

  absl::Status Remove(const reconciler::ActualVolume& volume) override {
    std::lock_guard lock(mu_);
    records_.erase(volume.name);
    return absl::OkStatus();
  }

  std::map<std::string, reconciler::ActualVolume> records() const {
    std::lock_guard lock(mu_);
    return records_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, reconciler::ActualVolume> records_;
};

class FakeMountTable final : public reconciler::MountTable {
 public:
  absl::StatusOr<std::set<std::string>> MountPoints() override {
    std::lock_guard lock(mu);
    return mounts;
  }

  std::mutex mu;
  std::set<std::string> mounts;
};

}  // namespace stagehand::testing
