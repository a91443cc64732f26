#include "agent/stagehandctl_iscsi.h"

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>

#include <absl/strings/str_cat.h>

#include "agent/stagehandctl_format.h"
#include "base/file_io.h"
#include "iscsi/iscsi_errors.h"

namespace stagehand::ctl {
namespace {

constexpr char kFallbackInitiatorName[] = "iqn.2026-11.dev.stagehand:stagehandctl";

struct ContextDeleter {
  void operator()(iscsi_context* ctx) const { (void)iscsi_destroy_context(ctx); }
};

using ContextPtr = std::unique_ptr<iscsi_context, ContextDeleter>;

struct TaskDeleter {
  void operator()(scsi_task* task) const { scsi_free_scsi_task(task); }
};

// One asynchronous libiscsi step and what its callback reported.
struct Step {
  bool done = false;
  int status = 0;
  std::string error;                      // iscsi_get_error() when the callback reported a failure.
  std::vector<DiscoveredTarget> targets;  // Discovery only.
};

// libiscsi overwrites its error text when iscsi_service() then fails as well, so the callback
// keeps the first, more specific one.
void Finish(iscsi_context* ctx, int status, Step* step) {
  step->done = true;
  step->status = status;
  if (status != SCSI_STATUS_GOOD) {
    const char* error = iscsi_get_error(ctx);
    step->error = error != nullptr ? error : "";
  }
}

void OnStep(iscsi_context* ctx, int status, void*, void* private_data) {
  Finish(ctx, status, static_cast<Step*>(private_data));
}

void OnDiscovery(iscsi_context* ctx, int status, void* command_data, void* private_data) {
  auto* step = static_cast<Step*>(private_data);
  Finish(ctx, status, step);
  if (status != SCSI_STATUS_GOOD) {
    return;
  }
  // The list is only valid during the callback.
  for (auto* a = static_cast<iscsi_discovery_address*>(command_data); a != nullptr; a = a->next) {
    DiscoveredTarget t;
    t.name = a->target_name != nullptr ? a->target_name : "";
    for (auto* p = a->portals; p != nullptr; p = p->next) {
      if (p->portal != nullptr) {
        t.portals.emplace_back(p->portal);
      }
    }
    step->targets.push_back(std::move(t));
  }
}

// Services `ctx` until `step` completes or `timeout_seconds` pass. `start` returns what the
// libiscsi *_async call returned.
absl::Status Run(iscsi_context* ctx, const std::string& what, int timeout_seconds, Step& step,
                 int start) {
  if (start != 0) {
    return iscsi::MapLibiscsiError(what, iscsi_get_error(ctx));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  while (!step.done) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::UnavailableError(
          absl::StrCat(what, ": no answer within ", timeout_seconds, " s"));
    }
    pollfd pfd{iscsi_get_fd(ctx), static_cast<short>(iscsi_which_events(ctx)), 0};
    const int n = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (n < 0 && errno != EINTR) {
      return ErrnoStatus(errno, absl::StrCat(what, ": poll"));
    }
    if (iscsi_service(ctx, n > 0 ? pfd.revents : 0) < 0) {
      return iscsi::MapLibiscsiError(what, step.error.empty() ? iscsi_get_error(ctx) : step.error);
    }
  }
  if (step.status != SCSI_STATUS_GOOD) {
    return iscsi::MapLibiscsiError(what, step.error.empty() ? iscsi_get_error(ctx) : step.error);
  }
  return absl::OkStatus();
}

// The standard INQUIRY's product revision. iscsi::Connection reads vendor and product but keeps
// no revision, so this asks once more on its context.
std::string ReadRevision(iscsi::Connection& conn) {
  std::unique_ptr<scsi_task, TaskDeleter> task(
      iscsi_inquiry_sync(conn.Context(), static_cast<int>(conn.Lun()), 0, 0, 255));
  if (!task || task->status != SCSI_STATUS_GOOD) {
    return "";
  }
  auto* inq = static_cast<scsi_inquiry_standard*>(scsi_datain_unmarshall(task.get()));
  if (inq == nullptr) {
    return "";
  }
  std::string rev(inq->product_revision_level);
  while (!rev.empty() && rev.back() == ' ') {
    rev.pop_back();
  }
  return rev;
}

google::protobuf::Value StringValue(const std::string& s) {
  google::protobuf::Value v;
  v.set_string_value(s);
  return v;
}

google::protobuf::Value NumberValue(double d) {
  google::protobuf::Value v;
  v.set_number_value(d);
  return v;
}

google::protobuf::Value StringList(const std::vector<std::string>& items) {
  google::protobuf::Value v;
  auto* list = v.mutable_list_value();
  for (const auto& s : items) {
    *list->add_values() = StringValue(s);
  }
  return v;
}

}  // namespace

std::string DefaultInitiatorName(const std::string& conf) {
  if (auto text = ReadFileToString(conf); text.ok()) {
    if (std::string name = InitiatorNameFromConf(*text); !name.empty()) {
      return name;
    }
  }
  return kFallbackInitiatorName;
}

absl::StatusOr<std::optional<iscsi::ChapCredentials>> DiscoveryChap(
    const std::map<std::string, std::string>& secrets) {
  auto get = [&](const char* key) {
    auto it = secrets.find(absl::StrCat("node.sendtargets.auth.", key));
    return it == secrets.end() ? std::string() : it->second;
  };
  iscsi::ChapCredentials c{get("username"), get("password"), get("username_in"),
                           get("password_in")};
  if (c.user.empty() && c.secret.empty() && c.user_in.empty() && c.secret_in.empty()) {
    return std::nullopt;
  }
  if (c.user.empty() || c.secret.empty()) {
    return absl::InvalidArgumentError(
        "discovery CHAP needs both 'node.sendtargets.auth.username' and "
        "'node.sendtargets.auth.password'");
  }
  if (c.user_in.empty() != c.secret_in.empty()) {
    return absl::InvalidArgumentError(
        "mutual discovery CHAP needs both 'node.sendtargets.auth.username_in' and "
        "'node.sendtargets.auth.password_in'");
  }
  return c;
}

absl::StatusOr<std::vector<DiscoveredTarget>> Discover(
    const iscsi::Portal& portal, const std::string& initiator_name,
    const std::optional<iscsi::ChapCredentials>& chap, int timeout_seconds) {
  const std::string address = portal.ToString();
  ContextPtr ctx(iscsi_create_context(initiator_name.c_str()));
  if (!ctx) {
    return absl::ResourceExhaustedError("cannot create a libiscsi context");
  }
  iscsi_set_session_type(ctx.get(), ISCSI_SESSION_DISCOVERY);
  iscsi_set_timeout(ctx.get(), timeout_seconds);
  iscsi_set_tcp_syncnt(ctx.get(), 3);
  iscsi_set_noautoreconnect(ctx.get(), 1);
  if (chap) {
    if (iscsi_set_initiator_username_pwd(ctx.get(), chap->user.c_str(), chap->secret.c_str()) !=
        0) {
      return absl::InvalidArgumentError("discovery CHAP credentials rejected locally");
    }
    if (!chap->user_in.empty() && iscsi_set_target_username_pwd(ctx.get(), chap->user_in.c_str(),
                                                                chap->secret_in.c_str()) != 0) {
      return absl::InvalidArgumentError("mutual discovery CHAP credentials rejected locally");
    }
  }
  {
    Step step;
    SH_RETURN_IF_ERROR(Run(ctx.get(), absl::StrCat("connect to ", address), timeout_seconds, step,
                           iscsi_connect_async(ctx.get(), address.c_str(), OnStep, &step)));
  }
  {
    Step step;
    SH_RETURN_IF_ERROR(Run(ctx.get(), absl::StrCat("discovery login at ", address), timeout_seconds,
                           step, iscsi_login_async(ctx.get(), OnStep, &step)));
  }
  Step discovery;
  SH_RETURN_IF_ERROR(Run(ctx.get(), absl::StrCat("SendTargets at ", address), timeout_seconds,
                         discovery, iscsi_discovery_async(ctx.get(), OnDiscovery, &discovery)));
  {
    // Best effort: the answer is in; a target that drops the connection instead is fine.
    Step step;
    (void)Run(ctx.get(), "logout", timeout_seconds, step,
              iscsi_logout_async(ctx.get(), OnStep, &step));
  }
  return std::move(discovery.targets);
}

absl::StatusOr<ProbeResult> Probe(const iscsi::LoginParams& params) {
  SH_ASSIGN_OR_RETURN(auto conn, iscsi::Connection::Login(params));
  ProbeResult r;
  r.portal = params.portal.ToString();
  r.iqn = params.iqn;
  r.lun = params.lun;
  SH_ASSIGN_OR_RETURN(r.identity, conn->ReadIdentity());
  r.revision = ReadRevision(*conn);
  SH_ASSIGN_OR_RETURN(r.capacity, conn->ReadCapacity());
  SH_RETURN_IF_ERROR(conn->Logout());
  return r;
}

google::protobuf::Struct ToStruct(const std::vector<DiscoveredTarget>& targets) {
  google::protobuf::Struct s;
  auto* list = (*s.mutable_fields())["targets"].mutable_list_value();
  for (const auto& t : targets) {
    google::protobuf::Value entry;
    auto& fields = *entry.mutable_struct_value()->mutable_fields();
    fields["name"] = StringValue(t.name);
    fields["portals"] = StringList(t.portals);
    *list->add_values() = std::move(entry);
  }
  return s;
}

google::protobuf::Struct ToStruct(const ProbeResult& r) {
  google::protobuf::Struct s;
  auto& f = *s.mutable_fields();
  f["portal"] = StringValue(r.portal);
  f["iqn"] = StringValue(r.iqn);
  f["lun"] = NumberValue(r.lun);
  f["vendor"] = StringValue(r.identity.vendor);
  f["product"] = StringValue(r.identity.product);
  f["revision"] = StringValue(r.revision);
  // Exact in a double up to 2^53 bytes (8 PiB); the block count and size give the rest.
  f["capacityBytes"] = NumberValue(static_cast<double>(r.capacity.Bytes()));
  f["blocks"] = NumberValue(static_cast<double>(r.capacity.blocks));
  f["blockSize"] = NumberValue(r.capacity.block_size);
  f["wwn"] = StringValue(iscsi::PrimaryWwn(r.identity));
  f["serial"] = StringValue(r.identity.serial);
  f["designators"] = StringList(r.identity.designators);
  return s;
}

std::string FormatDiscovery(const std::vector<DiscoveredTarget>& targets) {
  if (targets.empty()) {
    return "(the portal reports no targets for this initiator)\n";
  }
  std::string out;
  for (const auto& t : targets) {
    absl::StrAppend(&out, t.name, "\n");
    for (const auto& p : t.portals) {
      absl::StrAppend(&out, "  portal ", p, "\n");
    }
  }
  return out;
}

std::string FormatProbe(const ProbeResult& r) {
  auto dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  std::string out = absl::StrCat("target:       ", r.iqn, " lun ", r.lun, " at ", r.portal, "\n",
                                 "vendor:       ", dash(r.identity.vendor), "\n",
                                 "product:      ", dash(r.identity.product), "\n",
                                 "revision:     ", dash(r.revision), "\n");
  absl::StrAppend(&out, "size:         ", r.capacity.Bytes(), " bytes (",
                  HumanBytes(r.capacity.Bytes()), ")\n", "block size:   ", r.capacity.block_size,
                  " bytes, ", r.capacity.blocks, " blocks\n");
  absl::StrAppend(&out, "wwn:          ", dash(iscsi::PrimaryWwn(r.identity)), "\n",
                  "serial:       ", dash(r.identity.serial), "\n");
  if (r.identity.designators.empty()) {
    absl::StrAppend(&out, "designators:  none (no VPD page 0x83)\n");
  } else {
    absl::StrAppend(&out, "designators:\n");
    for (const auto& d : r.identity.designators) {
      absl::StrAppend(&out, "  ", d, "\n");
    }
  }
  return out;
}

}  // namespace stagehand::ctl
