#pragma once

// A LUN's SCSI-3 persistent reservations as SPC-4 has a target keep them, in memory, with one
// iscsi::ReservationChannel per I_T nexus: enough of REGISTER, REGISTER AND IGNORE EXISTING
// KEY, RESERVE, RELEASE and PREEMPT for the claim and renewal logic's unit tests. The real
// target (tgtd) is what the integration and QEMU guest tests use.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "iscsi/persistent_reservation.h"

namespace stagehand::transport::kernel::testing {

class FakeReservationTarget {
 public:
  // A channel on `nexus` (a path of some node).
  std::unique_ptr<iscsi::ReservationChannel> Nexus(const std::string& nexus) {
    return std::make_unique<Channel>(*this, nexus);
  }

  // The key registered on `nexus`; 0 when none.
  uint64_t KeyOf(const std::string& nexus) const {
    auto it = keys_.find(nexus);
    return it == keys_.end() ? 0 : it->second;
  }

  std::optional<std::string> holder() const { return holder_; }

  uint32_t generation() const { return generation_; }

  size_t registrations() const { return keys_.size(); }

  // A restart of a target that keeps no reservations (tgt).
  void Forget() {
    keys_.clear();
    holder_.reset();
    generation_ = 0;
  }

  // A target without persistent reservations: every command is ILLEGAL REQUEST.
  bool unsupported = false;

  // The next PERSISTENT RESERVE OUT on `nexus` runs, but its answer is lost (Unavailable).
  void LoseNextAnswer(const std::string& nexus) { lose_[nexus] = true; }

  // Commands that fail as a path that is down does (Unavailable).
  void SetDown(const std::string& nexus, bool down) { down_[nexus] = down; }

 private:
  class Channel : public iscsi::ReservationChannel {
   public:
    Channel(FakeReservationTarget& t, std::string nexus) : t_(t), nexus_(std::move(nexus)) {}

    absl::StatusOr<iscsi::Reservations> ReadReservations() override {
      if (t_.down_[nexus_]) {
        return absl::UnavailableError("path down");
      }
      if (t_.unsupported) {
        return absl::UnimplementedError("ILLEGAL REQUEST");
      }
      iscsi::Reservations r;
      r.generation = t_.generation_;
      for (const auto& [nexus, key] : t_.keys_) {
        r.keys.push_back(key);
      }
      if (t_.holder_) {
        r.holder = t_.keys_.at(*t_.holder_);
        r.type = t_.type_;
      }
      return r;
    }

    absl::Status ReserveOut(iscsi::ReserveAction action, uint64_t key, uint64_t service_key,
                            uint8_t type) override {
      if (t_.down_[nexus_]) {
        return absl::UnavailableError("path down");
      }
      absl::Status done = Out(action, key, service_key, type);
      if (std::exchange(t_.lose_[nexus_], false)) {
        return absl::UnavailableError("the answer was lost");
      }
      return done;
    }

   private:
    absl::Status Out(iscsi::ReserveAction action, uint64_t key, uint64_t service_key,
                     uint8_t type) {
      const uint64_t mine = t_.KeyOf(nexus_);
      switch (action) {
        case iscsi::ReserveAction::kRegister:
          if (key != mine) {
            return Conflict();
          }
          [[fallthrough]];
        case iscsi::ReserveAction::kRegisterAndIgnoreExistingKey:
          if (service_key == 0) {
            t_.Unregister(nexus_);
          } else {
            t_.keys_[nexus_] = service_key;
          }
          ++t_.generation_;
          return absl::OkStatus();
        case iscsi::ReserveAction::kReserve:
          if (mine == 0 || key != mine || (t_.holder_ && *t_.holder_ != nexus_)) {
            return Conflict();
          }
          t_.holder_ = nexus_;
          t_.type_ = type;
          return absl::OkStatus();
        case iscsi::ReserveAction::kRelease:
          if (mine == 0 || key != mine) {
            return Conflict();
          }
          if (t_.holder_ == nexus_) {
            t_.holder_.reset();
          }
          return absl::OkStatus();
        case iscsi::ReserveAction::kPreempt: {
          if (mine == 0 || key != mine) {
            return Conflict();
          }
          const bool held = t_.holder_ && t_.keys_.at(*t_.holder_) == service_key;
          bool found = false;
          for (auto it = t_.keys_.begin(); it != t_.keys_.end();) {
            if (it->second == service_key) {
              found = true;
              it = t_.keys_.erase(it);
            } else {
              ++it;
            }
          }
          if (!found) {
            return Conflict();
          }
          if (held) {
            t_.holder_ = nexus_;
            t_.type_ = type;
          }
          ++t_.generation_;
          return absl::OkStatus();
        }
      }
      return absl::InternalError("unknown action");
    }

    static absl::Status Conflict() { return absl::FailedPreconditionError("RESERVATION CONFLICT"); }

    FakeReservationTarget& t_;
    std::string nexus_;
  };

  void Unregister(const std::string& nexus) {
    keys_.erase(nexus);
    if (holder_ == nexus) {
      holder_.reset();
    }
  }

  std::map<std::string, uint64_t> keys_;
  std::optional<std::string> holder_;
  uint8_t type_ = 0;
  uint32_t generation_ = 0;
  std::map<std::string, bool> down_;
  std::map<std::string, bool> lose_;
};

}  // namespace stagehand::transport::kernel::testing
