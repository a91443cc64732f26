#include "reconciler/operation_executor.h"

#include <condition_variable>
#include <mutex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/fake_node_client.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::reconciler {
namespace {

using stagehand::testing::FakeDriverDirectory;
using stagehand::testing::FakeNodeClient;
using stagehand::testing::MemoryActualStore;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Collects what the executor reports; waits without sleeping.
class Results final : public OperationExecutor::Listener {
 public:
  void OperationDone(const Operation& operation, OperationResult result) override {
    std::lock_guard lock(mu_);
    done_.emplace_back(operation.name, std::move(result));
    cv_.notify_all();
  }

  void WorkersChanged() override {
    std::lock_guard lock(mu_);
    ++workers_changed_;
    cv_.notify_all();
  }

  // Waits for the `n`th result (1-based).
  OperationResult Wait(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return done_.size() >= n; });
    EXPECT_GE(done_.size(), n) << "no result";
    return done_.size() >= n ? done_[n - 1].second : OperationResult{};
  }

  std::string Name(size_t n) {
    std::lock_guard lock(mu_);
    return done_.size() >= n ? done_[n - 1].first : "";
  }

  void WaitForWorkersChanged() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return workers_changed_ > 0; });
    EXPECT_GT(workers_changed_, 0);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, OperationResult>> done_;
  int workers_changed_ = 0;
};

class OperationExecutorTest : public ::testing::Test {
 protected:
  OperationExecutorTest() { drivers_.Set("d.dev", driver_); }

  OperationExecutor::Options Options() const {
    OperationExecutor::Options o;
    o.staging_root = "/state";
    o.max_parallel = 2;
    return o;
  }

  static Operation StageOf(const std::string& name, const std::string& driver = "d.dev") {
    Operation o;
    o.name = name;
    o.op.kind = OpKind::kStage;
    o.driver = driver;
    VolumeSpec spec;
    spec.name = name;
    spec.driver = driver;
    spec.volume_handle = "h-" + name;
    o.spec = spec;
    o.manifest_file = name + ".yaml";
    return o;
  }

  std::shared_ptr<FakeNodeClient> driver_ = std::make_shared<FakeNodeClient>();
  FakeDriverDirectory drivers_;
  MemoryActualStore store_;
  Results results_;
};

TEST_F(OperationExecutorTest, StagesAndRecordsTheOutcome) {
  OperationExecutor executor(Options(), drivers_, store_, results_);
  executor.Submit({StageOf("v1")});

  OperationResult r = results_.Wait(1);

  ASSERT_THAT(r.status, stagehand::testing::IsOk());
  ASSERT_TRUE(r.actual.has_value());
  EXPECT_EQ(r.actual->stage, StageState::kStaged);
  EXPECT_EQ(r.actual->staging_path, StagingPathFor("/state", "d.dev", "h-v1"));
  EXPECT_EQ(store_.records().at("v1").stage, StageState::kStaged);
  EXPECT_EQ(store_.records().at("v1").manifest_file, "v1.yaml");
  EXPECT_EQ(executor.node_calls(), 1U);
}

// A call whose outcome is unknown leaves the record saying so.
TEST_F(OperationExecutorTest, AnUncertainStageStaysRecordedAsUncertain) {
  driver_->FailNext("stage", absl::DeadlineExceededError("slow"), /*effect=*/true);
  OperationExecutor executor(Options(), drivers_, store_, results_);
  executor.Submit({StageOf("v1")});

  OperationResult r = results_.Wait(1);

  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status));
  ASSERT_TRUE(r.actual.has_value());
  EXPECT_EQ(r.actual->stage, StageState::kUncertain);
  EXPECT_EQ(store_.records().at("v1").stage, StageState::kUncertain);
}

// The driver is looked up by the worker (not under the reconciler's lock): a missing one blocks
// the operation before anything is recorded or called.
TEST_F(OperationExecutorTest, AMissingDriverBlocksWithoutARecordOrACall) {
  OperationExecutor executor(Options(), drivers_, store_, results_);
  executor.Submit({StageOf("v1", "missing.dev")});

  OperationResult r = results_.Wait(1);

  EXPECT_TRUE(r.blocked);
  EXPECT_THAT(r.status.message(), HasSubstr("missing.dev"));
  EXPECT_FALSE(r.actual.has_value());
  EXPECT_THAT(store_.records(), IsEmpty());
  EXPECT_EQ(executor.node_calls(), 0U);
}

TEST_F(OperationExecutorTest, RecordOnlyOperationsCallNoDriver) {
  ActualVolume a;
  a.name = "v1";
  a.manifest_file = "old.yaml";
  a.staging_path = "/state/v1";
  ASSERT_TRUE(store_.Save(a).ok());
  OperationExecutor executor(Options(), drivers_, store_, results_);

  Operation record;
  record.name = "v1";
  record.op.kind = OpKind::kRecordFile;
  record.actual = a;
  record.manifest_file = "new.yaml";
  executor.Submit({record});
  EXPECT_EQ(results_.Wait(1).actual->manifest_file, "new.yaml");
  EXPECT_EQ(store_.records().at("v1").manifest_file, "new.yaml");

  Operation forget;
  forget.name = "v1";
  forget.op.kind = OpKind::kForget;
  forget.actual = a;
  executor.Submit({forget});
  EXPECT_FALSE(results_.Wait(2).actual.has_value());
  EXPECT_THAT(store_.records(), IsEmpty());
  EXPECT_EQ(executor.node_calls(), 0U);
  EXPECT_THAT(driver_->calls(), IsEmpty());
}

// A driver call that hangs in NodeStageVolume until released.
class HangingClient final : public NodeClient {
 public:
  absl::Status Stage(const StageCall&, std::chrono::milliseconds) override {
    std::unique_lock lock(mu_);
    started_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
    return absl::OkStatus();
  }

  absl::Status Unstage(const std::string&, const std::string&, std::chrono::milliseconds) override {
    return absl::OkStatus();
  }

  absl::Status Publish(const PublishCall&, std::chrono::milliseconds) override {
    return absl::OkStatus();
  }

  absl::Status Unpublish(const std::string&, const std::string&,
                         std::chrono::milliseconds) override {
    return absl::OkStatus();
  }

  void WaitStarted() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return started_; });
  }

  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool released_ = false;
};

// One call that hangs holds up no other volume while max_parallel allows another worker.
TEST_F(OperationExecutorTest, AHangingCallDoesNotHoldUpTheNextOperation) {
  auto hanging = std::make_shared<HangingClient>();
  drivers_.Set("hang.dev", hanging);
  OperationExecutor executor(Options(), drivers_, store_, results_);
  executor.Submit({StageOf("slow", "hang.dev")});
  hanging->WaitStarted();

  executor.Submit({StageOf("v2")});

  EXPECT_THAT(results_.Wait(1).status, stagehand::testing::IsOk());
  EXPECT_EQ(results_.Name(1), "v2");
  hanging->Release();
  EXPECT_EQ(results_.Wait(2).actual->name, "slow");
}

TEST_F(OperationExecutorTest, IdleWorkersLeaveAndAreReplacedWhenWorkComes) {
  OperationExecutor::Options options = Options();
  options.worker_idle_timeout = std::chrono::milliseconds(1);
  OperationExecutor executor(options, drivers_, store_, results_);
  executor.Submit({StageOf("v1")});
  results_.Wait(1);
  results_.WaitForWorkersChanged();

  executor.Submit({StageOf("v2")});

  EXPECT_THAT(results_.Wait(2).status, stagehand::testing::IsOk());
  executor.Stop();
  EXPECT_EQ(executor.workers(), 0U);
}

}  // namespace
}  // namespace stagehand::reconciler
