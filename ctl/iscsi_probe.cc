#include "ctl/iscsi_probe.h"

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include <memory>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "ctl/format.h"
#include "iscsi/initiator_name.h"
#include "iscsi/iscsi_handles.h"

namespace stagehand::ctl {
namespace {

constexpr char kFallbackInitiatorName[] = "iqn.2026-11.dev.stagehand:stagehandctl";

// The standard INQUIRY's product revision. iscsi::Connection reads vendor and product but keeps
// no revision, so this asks once more on its context.
std::string ReadRevision(iscsi::Connection& conn) {
  iscsi::ScsiTask task(iscsi_inquiry_sync(conn.Context(), static_cast<int>(conn.Lun()), 0, 0, 255));
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
    if (std::string name = iscsi::InitiatorNameFromConf(*text); !name.empty()) {
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
