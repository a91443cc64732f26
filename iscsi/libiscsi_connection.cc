#include "iscsi/libiscsi_connection.h"

#include <absl/strings/str_cat.h>

#include "iscsi/iscsi_errors.h"
#include "iscsi/iscsi_handles.h"

namespace stagehand::iscsi {

absl::StatusOr<std::unique_ptr<Connection>> Connection::Login(const LoginParams& params) {
  const std::string what = absl::StrCat("log in to '", params.iqn, "' lun ", params.lun, " at ",
                                        params.portal.ToString());
  IscsiContext ctx(iscsi_create_context(params.initiator_name.c_str()));
  if (!ctx) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": cannot create libiscsi context"));
  }
  iscsi_set_targetname(ctx.get(), params.iqn.c_str());
  iscsi_set_session_type(ctx.get(), ISCSI_SESSION_NORMAL);
  iscsi_set_header_digest(ctx.get(), ISCSI_HEADER_DIGEST_NONE_CRC32C);
  iscsi_set_timeout(ctx.get(), params.timeout_seconds);
  iscsi_set_tcp_syncnt(ctx.get(), 3);
  // We reconnect ourselves so that the LUN identity is checked before I/O resumes.
  iscsi_set_noautoreconnect(ctx.get(), 1);
  if (params.chap) {
    if (iscsi_set_initiator_username_pwd(ctx.get(), params.chap->user.c_str(),
                                         params.chap->secret.c_str()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": CHAP credentials rejected locally"));
    }
    if (!params.chap->user_in.empty() &&
        iscsi_set_target_username_pwd(ctx.get(), params.chap->user_in.c_str(),
                                      params.chap->secret_in.c_str()) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": mutual CHAP credentials rejected locally"));
    }
  }
  const std::string portal = params.portal.ToString();

  // Connect, log in and TEST UNIT READY asynchronously under our own deadline: libiscsi's sync
  // login has no timeout, and a half-started target must not hang a stage or a reconnect.
  AsyncStep step;
  const absl::Status logged_in =
      RunAsyncStep(ctx.get(), what, params.timeout_seconds, step,
                   iscsi_full_connect_async(ctx.get(), portal.c_str(), static_cast<int>(params.lun),
                                            OnAsyncStep, &step),
                   params.keepalive);
  if (!logged_in.ok()) {
    ctx.reset();  // Now, while `step` exists: what is still queued is cancelled into it.
    return logged_in;
  }
  return std::unique_ptr<Connection>(new Connection(
      std::move(ctx), params, absl::StrCat("'", params.iqn, "' lun ", params.lun, " at ", portal)));
}

Connection::~Connection() {
  if (ctx_ != nullptr && !logged_out_) {
    (void)iscsi_logout_sync(ctx_.get());
  }
}

IscsiContext Connection::ReleaseContext() {
  return std::exchange(ctx_, nullptr);
}

absl::Status Connection::Logout() {
  if (logged_out_ || ctx_ == nullptr) {
    return absl::OkStatus();
  }
  logged_out_ = true;
  if (iscsi_logout_sync(ctx_.get()) != 0) {
    return MapLibiscsiError(absl::StrCat("log out of ", what_), iscsi_get_error(ctx_.get()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ScsiTask> Connection::Run(const std::string& what,
                                         const std::function<scsi_task*(TaskStep*)>& start) {
  if (ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(what, ": the connection failed earlier"));
  }
  TaskStep step;
  auto task = RunTaskStep(ctx_.get(), what, timeout_seconds_, step, start(&step), keepalive_);
  if (!step.done) {
    // Timed out with the command still queued: drop the connection now, while `step` exists
    // (its callback runs as the context goes); later calls fail.
    ctx_.reset();
  }
  return task;
}

absl::Status Connection::Failed(const std::string& what,
                                const absl::StatusOr<ScsiTask>& ran) const {
  if (!ran.ok()) {
    return ran.status();
  }
  return MapLibiscsiError(what, ctx_ != nullptr ? iscsi_get_error(ctx_.get()) : "");
}

absl::StatusOr<std::vector<uint8_t>> Connection::Inquiry(bool evpd, int page) {
  const std::string what = absl::StrCat("INQUIRY page 0x", absl::Hex(page), " of ", what_);
  auto ran = Run(what, [&](TaskStep* step) {
    return iscsi_inquiry_task(ctx_.get(), static_cast<int>(lun_), evpd ? 1 : 0, page, 255,
                              OnTaskStep, step);
  });
  ScsiTask task = ran.ok() ? std::move(*ran) : ScsiTask();
  if (!task || task->status != SCSI_STATUS_GOOD) {
    return Failed(what, ran);
  }
  return std::vector<uint8_t>(task->datain.data, task->datain.data + task->datain.size);
}

absl::StatusOr<LunIdentity> Connection::ReadIdentity() {
  LunIdentity id;
  SH_ASSIGN_OR_RETURN(auto standard, Inquiry(false, 0));
  if (!standard.empty() && (standard[0] >> 5) != 0) {
    // Peripheral qualifier: no logical unit behind this number right now (being re-created?).
    return absl::UnavailableError(absl::StrCat(what_, " has no logical unit connected"));
  }
  if (standard.size() >= 32) {
    auto field = [&](size_t from, size_t to) {
      std::string s(standard.begin() + static_cast<std::ptrdiff_t>(from),
                    standard.begin() + static_cast<std::ptrdiff_t>(to));
      while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) {
        s.pop_back();
      }
      return s;
    };
    id.vendor = field(8, 16);
    id.product = field(16, 32);
  }
  // Both pages are optional in SPC: a target that lacks one says so (ILLEGAL REQUEST). Any other
  // failure (a connection dropped during the read) is an error: an identity taken as empty
  // would not match the recorded one and fail a healthy volume closed for good.
  SH_ASSIGN_OR_RETURN(auto page83, OptionalVpdPage(0x83));
  if (page83.has_value()) {
    SH_ASSIGN_OR_RETURN(id.designators, ParseDeviceIdentificationPage(*page83));
  }
  SH_ASSIGN_OR_RETURN(auto page80, OptionalVpdPage(0x80));
  if (page80.has_value()) {
    SH_ASSIGN_OR_RETURN(id.serial, ParseUnitSerialPage(*page80));
  }
  return id;
}

absl::StatusOr<std::optional<std::vector<uint8_t>>> Connection::OptionalVpdPage(int page) {
  auto ran = Run("INQUIRY", [&](TaskStep* step) {
    return iscsi_inquiry_task(ctx_.get(), static_cast<int>(lun_), 1, page, 255, OnTaskStep, step);
  });
  ScsiTask task = ran.ok() ? std::move(*ran) : ScsiTask();
  const VpdAnswer answer =
      task ? ClassifyVpdAnswer(true, task->status, task->sense.key, task->sense.ascq)
           : VpdAnswer::kError;
  switch (answer) {
    case VpdAnswer::kData:
      return std::optional<std::vector<uint8_t>>(
          std::vector<uint8_t>(task->datain.data, task->datain.data + task->datain.size));
    case VpdAnswer::kUnsupported:
      return std::optional<std::vector<uint8_t>>();
    case VpdAnswer::kError:
      break;
  }
  const absl::Status s =
      Failed(absl::StrCat("INQUIRY VPD page 0x", absl::Hex(page), " of ", what_), ran);
  // Whatever the mapping says, the identity is unknown, not different: retry the login.
  return absl::UnavailableError(s.message());
}

absl::StatusOr<LunCapacity> Connection::ReadCapacity() {
  auto ran = Run("READ CAPACITY(16)", [&](TaskStep* step) {
    return iscsi_readcapacity16_task(ctx_.get(), static_cast<int>(lun_), OnTaskStep, step);
  });
  ScsiTask task = ran.ok() ? std::move(*ran) : ScsiTask();
  if (!task || task->status != SCSI_STATUS_GOOD) {
    return Failed(absl::StrCat("READ CAPACITY(16) of ", what_), ran);
  }
  auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task.get()));
  if (rc16 == nullptr) {
    return absl::InternalError(absl::StrCat("cannot parse READ CAPACITY(16) of ", what_));
  }
  LunCapacity cap;
  cap.blocks = rc16->returned_lba + 1;
  cap.block_size = rc16->block_length;
  if (cap.block_size == 0 || cap.block_size % 512 != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what_, " reports an unsupported block size of ", cap.block_size));
  }
  return cap;
}

}  // namespace stagehand::iscsi
