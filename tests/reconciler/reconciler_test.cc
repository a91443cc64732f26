#include "reconciler/reconciler.h"

#include <functional>

#include <absl/strings/match.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/fake_node_client.h"
#include "tests/fakes/manual_clock.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::reconciler {
namespace {

using stagehand::testing::FakeDriverDirectory;
using stagehand::testing::FakeMountTable;
using stagehand::testing::FakeNodeClient;
using stagehand::testing::IsOk;
using stagehand::testing::ManualClock;
using stagehand::testing::MemoryActualStore;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

VolumeSpec Spec(const std::string& name, std::vector<PublishTarget> publish) {
  VolumeSpec s;
  s.name = name;
  s.driver = "d.dev";
  s.volume_handle = "handle-" + name;
  s.capability.fs_type = "ext4";
  s.volume_context = {{"iqn", "iqn.x"}};
  s.publish = std::move(publish);
  return s;
}

// A record of volume `name` (file "<name>.yaml", driver d.dev, handle "handle-<name>") staged
// at its staging path under /state, as a previous run would have left it.
ActualVolume StagedRecord(const std::string& name, std::vector<ActualTarget> targets = {}) {
  ActualVolume v;
  v.name = name;
  v.manifest_file = name + ".yaml";
  v.driver = "d.dev";
  v.volume_handle = "handle-" + name;
  v.capability.fs_type = "ext4";
  v.volume_context = {{"iqn", "iqn.x"}};
  v.staging_path = StagingPathFor("/state", "d.dev", v.volume_handle);
  v.stage = StageState::kStaged;
  v.targets = std::move(targets);
  return v;
}

const VolumeStatus* Find(const ReconcilerStatus& s, const std::string& name) {
  for (const auto& v : s.volumes) {
    if (v.name == name) {
      return &v;
    }
  }
  return nullptr;
}

std::string Phase(const ReconcilerStatus& s, const std::string& name) {
  const VolumeStatus* v = Find(s, name);
  return v == nullptr ? "absent" : std::string(VolumePhaseName(v->phase));
}

class ReconcilerTest : public ::testing::Test {
 protected:
  ReconcilerTest() {
    driver_ = std::make_shared<FakeNodeClient>(&mounts_.mounts, &mounts_.mu);
    drivers_.Set("d.dev", driver_);
  }

  ReconcilerOptions Options() const {
    ReconcilerOptions o;
    o.staging_root = "/state";
    o.backoff = BackoffPolicy{std::chrono::milliseconds(500), std::chrono::seconds(120), 2.0, 0};
    o.max_parallel = 4;
    return o;
  }

  void StartReconciler() {
    reconciler_ = std::make_unique<Reconciler>(Options(), drivers_, store_, mounts_, clock_);
    ASSERT_THAT(reconciler_->Start(), IsOk());
  }

  // Waits for the status to satisfy `predicate` (no sleeps: status generations).
  ReconcilerStatus WaitUntil(const std::function<bool(const ReconcilerStatus&)>& predicate) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    ReconcilerStatus status = reconciler_->Status();
    while (!predicate(status) && std::chrono::steady_clock::now() < deadline) {
      status = reconciler_->WaitForChange(status.generation, std::chrono::seconds(1));
    }
    EXPECT_TRUE(predicate(status)) << "condition not reached";
    if (!predicate(status)) {
      for (const auto& v : status.volumes) {
        std::cerr << v.name << " phase=" << VolumePhaseName(v.phase) << " blocked=" << v.blocked
                  << " error=" << v.last_error << "\n";
      }
    }
    return status;
  }

  // Waits until the reconciler is ready and idle (nothing in flight).
  ReconcilerStatus Settle() {
    return WaitUntil([](const ReconcilerStatus& s) {
      for (const auto& v : s.volumes) {
        if (!v.in_flight.empty()) {
          return false;
        }
      }
      return s.ready;
    });
  }

  std::vector<std::string> Calls() const {
    std::vector<std::string> out;
    for (const auto& c : driver_->calls()) {
      out.push_back(c.method + " " + c.path);
    }
    return out;
  }

  ManualClock clock_;
  FakeMountTable mounts_;
  FakeDriverDirectory drivers_;
  MemoryActualStore store_;
  std::shared_ptr<FakeNodeClient> driver_;
  std::unique_ptr<Reconciler> reconciler_;
};

const std::string kStaging = StagingPathFor("/state", "d.dev", "handle-v1");

TEST_F(ReconcilerTest, IdleWorkersLeaveAndWorkLaterStillGetsDone) {
  ReconcilerOptions options = Options();
  options.worker_idle_timeout = std::chrono::milliseconds(1);
  reconciler_ = std::make_unique<Reconciler>(options, drivers_, store_, mounts_, clock_);
  ASSERT_THAT(reconciler_->Start(), IsOk());
  EXPECT_FALSE(reconciler_->Ready());
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published" && s.workers == 0; });
  EXPECT_TRUE(reconciler_->Ready());
  reconciler_->Declare("v2.yaml", Spec("v2", {{"/srv/b", false}}));
  auto status = WaitUntil([](const auto& s) { return Phase(s, "v2") == "published"; });
  EXPECT_EQ(Phase(status, "v1"), "published");
  WaitUntil([](const auto& s) { return s.workers == 0; });
}

TEST_F(ReconcilerTest, StagesThenPublishesADeclaredVolume) {
  StartReconciler();

  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}, {"/srv/b", true}}));
  reconciler_->DesiredComplete();
  auto status = WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a", "publish /srv/b"));
  const auto record = store_.records().at("v1");
  EXPECT_EQ(record.stage, StageState::kStaged);
  EXPECT_EQ(record.manifest_file, "v1.yaml");
  EXPECT_EQ(record.targets.size(), 2u);
  EXPECT_EQ(Find(status, "v1")->staging_path, kStaging);
}

TEST_F(ReconcilerTest, AReportedConditionIsShownUntilTheVolumeIsHealthyAgain) {
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  auto published = WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  reconciler_->ReportCondition("v1", "iSCSI session process is not running");
  reconciler_->ReportCondition("nobody", "ignored");
  auto abnormal = reconciler_->Status();
  reconciler_->ReportCondition("v1", "");

  EXPECT_GT(abnormal.generation, published.generation) << "watchers are woken";
  EXPECT_EQ(Find(abnormal, "v1")->condition, "iSCSI session process is not running");
  EXPECT_EQ(Find(abnormal, "nobody"), nullptr);
  EXPECT_EQ(Find(reconciler_->Status(), "v1")->condition, "");
}

TEST_F(ReconcilerTest, RemovingTheManifestUnpublishesEveryTargetThenUnstages) {
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}, {"/srv/b", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  reconciler_->RemoveManifest("v1.yaml");
  WaitUntil([](const auto& s) { return Find(s, "v1") == nullptr; });

  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a", "publish /srv/b",
                                   "unpublish /srv/a", "unpublish /srv/b", "unstage " + kStaging));
  EXPECT_TRUE(store_.records().empty());
  EXPECT_TRUE(driver_->staged().empty());
}

TEST_F(ReconcilerTest, AddingOrRemovingATargetTouchesOnlyThatTarget) {
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}, {"/srv/b", false}}));
  WaitUntil([this](const auto&) { return driver_->published().contains("/srv/b"); });
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/b", false}}));
  WaitUntil([this](const auto&) { return !driver_->published().contains("/srv/a"); });
  Settle();

  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a", "publish /srv/b",
                                   "unpublish /srv/a"));
}

TEST_F(ReconcilerTest, RetriesAFailedStageWithBackoffOnTheClock) {
  driver_->FailNext("stage", absl::InvalidArgumentError("bad iqn"));
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();

  auto failed = WaitUntil([](const auto& s) {
    const auto* v = Find(s, "v1");
    return v != nullptr && v->attempts == 1 && v->in_flight.empty();
  });
  EXPECT_EQ(Find(failed, "v1")->phase, VolumePhase::kError);
  EXPECT_THAT(Find(failed, "v1")->last_error, HasSubstr("bad iqn"));
  EXPECT_TRUE(Find(failed, "v1")->next_retry.has_value());
  EXPECT_TRUE(store_.records().empty()) << "a definite failure of a first stage leaves nothing";
  // Nothing happens until the backoff has passed.
  reconciler_->Poke();
  Settle();
  EXPECT_EQ(driver_->calls().size(), 1u);

  clock_.Advance(std::chrono::milliseconds(500));
  reconciler_->Poke();
  auto done = WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  EXPECT_EQ(Find(done, "v1")->attempts, 0);
  EXPECT_EQ(Find(done, "v1")->last_error, "");
}

TEST_F(ReconcilerTest, AnUncertainStageIsNeverReportedStagedAndIsRetried) {
  // The stage happened but the reply was lost.
  driver_->FailNext("stage", absl::DeadlineExceededError("timeout"), /*effect=*/true);
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();

  auto uncertain = WaitUntil([](const auto& s) {
    const auto* v = Find(s, "v1");
    return v != nullptr && v->attempts == 1 && v->in_flight.empty();
  });
  EXPECT_EQ(Find(uncertain, "v1")->stage_state, "uncertain");
  EXPECT_EQ(store_.records().at("v1").stage, StageState::kUncertain);
  EXPECT_TRUE(driver_->published().empty());

  clock_.Advance(std::chrono::seconds(1));
  reconciler_->Poke();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "stage " + kStaging, "publish /srv/a"));
}

TEST_F(ReconcilerTest, AnUncertainStageOfARemovedVolumeIsUnstaged) {
  driver_->FailNext("stage", absl::UnavailableError("connection reset"), /*effect=*/true);
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) {
    const auto* v = Find(s, "v1");
    return v != nullptr && v->attempts == 1 && v->in_flight.empty();
  });

  reconciler_->RemoveManifest("v1.yaml");
  WaitUntil([](const auto& s) { return Find(s, "v1") == nullptr; });

  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "unstage " + kStaging));
  EXPECT_TRUE(driver_->staged().empty());
}

TEST_F(ReconcilerTest, ReconstructionAdoptsIntactVolumesWithoutACall) {
  ActualVolume v = StagedRecord("v1", {{"/srv/a", false, PublishState::kPublished}});
  ASSERT_THAT(store_.Save(v), IsOk());
  mounts_.mounts = {kStaging, "/srv/a"};

  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  auto status = Settle();

  EXPECT_EQ(Phase(status, "v1"), "published");
  EXPECT_EQ(reconciler_->node_calls(), 0u);
}

TEST_F(ReconcilerTest, ReconstructionRepublishesATargetWhoseMountIsGone) {
  ActualVolume v = StagedRecord("v1", {{"/srv/a", false, PublishState::kPublished}});
  ASSERT_THAT(store_.Save(v), IsOk());
  mounts_.mounts = {kStaging};  // The target's mount is gone (e.g. after a reboot of a tmpfs).
  ASSERT_THAT(driver_->Stage({"handle-v1", kStaging, {}, {}, {}, ""}, {}), IsOk());

  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([this](const auto& s) {
    return Phase(s, "v1") == "published" && driver_->published().contains("/srv/a");
  });

  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a"));
}

TEST_F(ReconcilerTest, ABlockVolumeThatLostItsPublishIsStagedAgainBeforePublishing) {
  // After a reboot: the record says staged and published, nothing is mounted, and a block
  // volume's staging leaves no mount to check.
  ActualVolume v = StagedRecord("v1", {{"/srv/a", false, PublishState::kPublished}});
  v.capability = {};
  v.capability.block = true;
  ASSERT_THAT(store_.Save(v), IsOk());
  auto spec = Spec("v1", {{"/srv/a", false}});
  spec.capability = v.capability;

  StartReconciler();
  reconciler_->Declare("v1.yaml", spec);
  reconciler_->DesiredComplete();
  WaitUntil([this](const auto& s) {
    return Phase(s, "v1") == "published" && driver_->published().contains("/srv/a");
  });

  EXPECT_THAT(Calls(), ElementsAre("unpublish /srv/a", "stage " + kStaging, "publish /srv/a"));
}

TEST_F(ReconcilerTest, TwoVolumesCannotShareATargetPath) {
  StartReconciler();
  reconciler_->Declare("a.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->Declare("b.yaml", Spec("v2", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();

  auto status = WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  EXPECT_THAT(status.manifest_errors.at("b.yaml"), HasSubstr("already a target of volume 'v1'"));
  EXPECT_EQ(Find(status, "v2"), nullptr);
}

TEST_F(ReconcilerTest, OrphansAreTornDownOnlyOnceTheManifestsHaveBeenRead) {
  ActualVolume v = StagedRecord("old");
  ASSERT_THAT(store_.Save(v), IsOk());
  mounts_.mounts = {v.staging_path};

  StartReconciler();
  reconciler_->Poke();
  auto before = reconciler_->Status();
  EXPECT_EQ(reconciler_->node_calls(), 0u);
  EXPECT_FALSE(before.ready);
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return s.ready && Find(s, "old") == nullptr; });

  EXPECT_THAT(Calls(), ElementsAre("unstage " + v.staging_path));
}

TEST_F(ReconcilerTest, ABrokenManifestKeepsItsVolumeAcrossARestart) {
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });
  reconciler_->ReportManifestError("v1.yaml", "v1.yaml:3: unknown key 'drivr'");
  auto broken = Settle();
  EXPECT_EQ(Phase(broken, "v1"), "published");
  EXPECT_THAT(Find(broken, "v1")->manifest_error, HasSubstr("drivr"));

  // Restart: the file is still broken, so there is no good spec at all this time.
  reconciler_.reset();
  StartReconciler();
  reconciler_->ReportManifestError("v1.yaml", "v1.yaml:3: unknown key 'drivr'");
  reconciler_->DesiredComplete();
  auto status = Settle();

  EXPECT_EQ(Find(status, "v1")->blocked.empty(), false);
  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a"));
  EXPECT_TRUE(driver_->published().contains("/srv/a"));
}

TEST_F(ReconcilerTest, ARenamedManifestKeepsItsVolumeWithoutACallAndIsRecorded) {
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  reconciler_->RenameManifest("v1.yaml", "renamed.yaml");
  reconciler_->Declare("renamed.yaml", Spec("v1", {{"/srv/a", false}}));
  // The record learns the new name from an operation of its own (no CSI call).
  WaitUntil(
      [this](const auto&) { return store_.records().at("v1").manifest_file == "renamed.yaml"; });
  auto status = Settle();

  EXPECT_EQ(Phase(status, "v1"), "published");
  EXPECT_EQ(Find(status, "v1")->manifest_file, "renamed.yaml");
  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a"));
  EXPECT_EQ(store_.records().at("v1").manifest_file, "renamed.yaml");

  // The renamed file breaks and stagehand restarts: the record names the new file, so the
  // broken file still protects the volume.
  reconciler_->ReportManifestError("renamed.yaml", "renamed.yaml:1: bad");
  Settle();
  reconciler_.reset();
  StartReconciler();
  reconciler_->ReportManifestError("renamed.yaml", "renamed.yaml:1: bad");
  reconciler_->DesiredComplete();
  Settle();
  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a"));
  EXPECT_TRUE(driver_->published().contains("/srv/a"));
}

// The renamed file is recorded even while the volume's next operation cannot run (its driver
// is gone): a restart with the new file broken then still keeps the volume.
TEST_F(ReconcilerTest, ARenamedManifestIsRecordedWhileItsDriverIsMissing) {
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });
  drivers_.Remove("d.dev");

  reconciler_->RenameManifest("v1.yaml", "renamed.yaml");
  reconciler_->Declare("renamed.yaml", Spec("v1", {{"/srv/a", false}, {"/srv/b", false}}));
  auto waiting = WaitUntil([this](const auto& s) {
    return Phase(s, "v1") == "waiting" && store_.records().at("v1").manifest_file == "renamed.yaml";
  });
  EXPECT_THAT(Find(waiting, "v1")->blocked, HasSubstr("not registered"));

  reconciler_.reset();
  drivers_.Set("d.dev", driver_);
  StartReconciler();
  reconciler_->ReportManifestError("renamed.yaml", "renamed.yaml:1: bad");
  reconciler_->DesiredComplete();
  Settle();
  EXPECT_TRUE(driver_->published().contains("/srv/a"));
  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a"));
}

TEST_F(ReconcilerTest, RenamingOverAnotherManifestTearsDownOnlyThatFilesVolume) {
  StartReconciler();
  reconciler_->Declare("a.yaml", Spec("va", {{"/srv/a", false}}));
  reconciler_->Declare("b.yaml", Spec("vb", {{"/srv/b", false}}));
  reconciler_->DesiredComplete();
  WaitUntil(
      [](const auto& s) { return Phase(s, "va") == "published" && Phase(s, "vb") == "published"; });

  reconciler_->RenameManifest("a.yaml", "b.yaml");
  auto status = WaitUntil([](const auto& s) { return Find(s, "vb") == nullptr; });

  EXPECT_EQ(Phase(status, "va"), "published");
  EXPECT_TRUE(driver_->published().contains("/srv/a"));
  EXPECT_FALSE(driver_->published().contains("/srv/b"));
}

TEST_F(ReconcilerTest, VolumesOfAMissingDriverWaitAndProceedWhenItAppears) {
  drivers_.Remove("d.dev");
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();

  auto waiting = WaitUntil([](const auto& s) { return Phase(s, "v1") == "waiting"; });
  EXPECT_THAT(Find(waiting, "v1")->blocked, HasSubstr("not registered"));
  drivers_.Set("d.dev", driver_);
  reconciler_->Poke();

  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });
}

TEST_F(ReconcilerTest, ChangingAnImmutableFieldIsAnErrorNotARemount) {
  StartReconciler();
  reconciler_->Declare("v1.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });
  auto changed = Spec("v1", {{"/srv/a", false}});
  changed.capability.fs_type = "xfs";

  reconciler_->Declare("v1.yaml", changed);
  auto status = WaitUntil([](const auto& s) { return Phase(s, "v1") == "waiting"; });

  EXPECT_THAT(Find(status, "v1")->blocked, HasSubstr("capability changed"));
  EXPECT_EQ(driver_->calls().size(), 2u);
}

TEST_F(ReconcilerTest, TheSameNameInTwoFilesIsAnErrorOnTheSecond) {
  StartReconciler();
  reconciler_->Declare("a.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->Declare("b.yaml", Spec("v1", {{"/srv/b", false}}));
  reconciler_->DesiredComplete();

  auto status = WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  EXPECT_THAT(status.manifest_errors.at("b.yaml"), HasSubstr("already declared in 'a.yaml'"));
  EXPECT_FALSE(driver_->published().contains("/srv/b"));
}

TEST_F(ReconcilerTest, OneVolumeHandleCannotBeDeclaredUnderTwoNames) {
  StartReconciler();
  reconciler_->Declare("a.yaml", Spec("v1", {{"/srv/a", false}}));
  auto twin = Spec("v2", {{"/srv/b", false}});
  twin.volume_handle = "handle-v1";
  reconciler_->Declare("b.yaml", twin);
  reconciler_->DesiredComplete();

  auto status = WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });

  EXPECT_THAT(status.manifest_errors.at("b.yaml"), HasSubstr("already declared as volume 'v1'"));
  EXPECT_EQ(Find(status, "v2"), nullptr);
}

TEST_F(ReconcilerTest, ARenamedVolumeWaitsForItsOldNameToBeTornDown) {
  StartReconciler();
  reconciler_->Declare("a.yaml", Spec("v1", {{"/srv/a", false}}));
  reconciler_->DesiredComplete();
  WaitUntil([](const auto& s) { return Phase(s, "v1") == "published"; });
  driver_->FailNext("unpublish", absl::UnavailableError("busy"));

  // Same file, same handle, new name: the old name is torn down, then the new one staged.
  auto renamed = Spec("v9", {{"/srv/a", false}});
  renamed.volume_handle = "handle-v1";
  reconciler_->Declare("a.yaml", renamed);
  WaitUntil([](const auto& s) {
    const auto* v = Find(s, "v9");
    const auto* old = Find(s, "v1");
    return v != nullptr && absl::StrContains(v->blocked, "torn down") && old != nullptr &&
           old->attempts == 1 && old->in_flight.empty();
  });
  clock_.Advance(std::chrono::seconds(1));
  reconciler_->Poke();
  WaitUntil([](const auto& s) { return Phase(s, "v9") == "published" && !Find(s, "v1"); });

  EXPECT_THAT(Calls(), ElementsAre("stage " + kStaging, "publish /srv/a", "unpublish /srv/a",
                                   "unpublish /srv/a", "unstage " + kStaging, "stage " + kStaging,
                                   "publish /srv/a"));
}

TEST_F(ReconcilerTest, ManyVolumesConvergeConcurrently) {
  StartReconciler();
  for (int i = 0; i < 50; ++i) {
    const std::string name = "v" + std::to_string(i);
    reconciler_->Declare(name + ".yaml", Spec(name, {{"/srv/" + name, false}}));
  }
  reconciler_->DesiredComplete();

  WaitUntil([](const auto& s) {
    int published = 0;
    for (const auto& v : s.volumes) {
      published += v.phase == VolumePhase::kPublished ? 1 : 0;
    }
    return published == 50;
  });

  EXPECT_EQ(reconciler_->node_calls(), 100u);
}

}  // namespace
}  // namespace stagehand::reconciler
