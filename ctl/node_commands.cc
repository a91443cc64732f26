#include "ctl/node_commands.h"

#include <yaml-cpp/yaml.h>

#include <iostream>
#include <map>

#include <absl/strings/str_cat.h>

#include "csiclient/capability.h"
#include "ctl/format.h"
#include "health/reason.h"

namespace stagehand::ctl {

absl::StatusOr<std::map<std::string, std::string>> LoadSecrets(
    const std::string& file, const std::vector<std::string>& items) {
  std::map<std::string, std::string> secrets;
  if (!file.empty()) {
    try {
      YAML::Node node = YAML::LoadFile(file);
      if (!node.IsMap()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--secrets-file '", file, "' must hold a YAML map of key: value"));
      }
      for (const auto& kv : node) {
        secrets[kv.first.as<std::string>()] = kv.second.as<std::string>();
      }
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("--secrets-file '", file, "': ", e.what()));
    }
  }
  SH_RETURN_IF_ERROR(ParseKeyValues(items, "--secret", &secrets));
  return secrets;
}

namespace {

bool FillCapability(const VolumeArgs& v, csi::v1::VolumeCapability* cap) {
  auto mode = csiclient::AccessModeNamed(v.access_mode);
  if (!mode.ok()) {
    std::cerr << "error: --access-mode: " << mode.status().message() << "\n";
    return false;
  }
  csiclient::FillCapability(
      {.block = v.block, .fs_type = v.fs_type, .mount_flags = v.mount_flags, .access_mode = *mode},
      cap);
  return true;
}

bool FillMaps(const VolumeArgs& v, google::protobuf::Map<std::string, std::string>* context,
              google::protobuf::Map<std::string, std::string>* secrets) {
  std::map<std::string, std::string> ctx;
  if (auto s = ParseKeyValues(v.context, "--context", &ctx); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return false;
  }
  context->insert(ctx.begin(), ctx.end());
  if (secrets != nullptr) {
    auto loaded = LoadSecrets(v.secrets_file, v.secrets);
    if (!loaded.ok()) {
      std::cerr << "error: " << loaded.status().message() << "\n";
      return false;
    }
    secrets->insert(loaded->begin(), loaded->end());
  }
  return true;
}

void AddVolumeFlags(CLI::App* cmd, VolumeArgs& v, bool capability) {
  cmd->add_option("--volume-id", v.volume_id, "Volume ID")->required();
  if (capability) {
    cmd->add_flag("--block", v.block, "Raw block access instead of a filesystem");
    cmd->add_option("--fs-type", v.fs_type, "ext4 (default) or xfs");
    cmd->add_option("--mount-flag", v.mount_flags, "Mount flag (repeatable)");
    cmd->add_option("--access-mode", v.access_mode,
                    "CSI access mode: SINGLE_NODE_WRITER, SINGLE_NODE_READER_ONLY, "
                    "SINGLE_NODE_SINGLE_WRITER, SINGLE_NODE_MULTI_WRITER, …")
        ->capture_default_str();
    cmd->add_option("-c,--context", v.context, "volume_context key=value (repeatable)");
  }
}

}  // namespace

NodeCommands AddNodeCommands(CLI::App& app, VolumeArgs& v) {
  NodeCommands n;
  CLI::App* node = app.add_subcommand("node", "CSI Node service (needs --endpoint)");
  node->require_subcommand(1);
  n.info = node->add_subcommand("info", "NodeGetInfo");
  n.caps = node->add_subcommand("capabilities", "NodeGetCapabilities")->alias("caps");
  n.stage = node->add_subcommand("stage", "NodeStageVolume");
  AddVolumeFlags(n.stage, v, true);
  n.stage->add_option("--staging-path", v.staging_path)->required();
  n.stage->add_option("--secrets-file", v.secrets_file, "YAML map of stage secrets (CHAP)");
  n.stage->add_option("--secret", v.secrets, "Stage secret key=value (repeatable; wins over file)");
  n.unstage = node->add_subcommand("unstage", "NodeUnstageVolume");
  AddVolumeFlags(n.unstage, v, false);
  n.unstage->add_option("--staging-path", v.staging_path)->required();
  n.publish = node->add_subcommand("publish", "NodePublishVolume");
  AddVolumeFlags(n.publish, v, true);
  n.publish->add_option("--staging-path", v.staging_path)->required();
  n.publish->add_option("--target-path", v.target_path)->required();
  n.publish->add_flag("--readonly", v.readonly);
  n.unpublish = node->add_subcommand("unpublish", "NodeUnpublishVolume");
  AddVolumeFlags(n.unpublish, v, false);
  n.unpublish->add_option("--target-path", v.target_path)->required();
  n.stats = node->add_subcommand("stats", "NodeGetVolumeStats");
  AddVolumeFlags(n.stats, v, false);
  n.stats->add_option("--path", v.path, "Staging or target path")->required();
  n.expand = node->add_subcommand("expand", "NodeExpandVolume");
  AddVolumeFlags(n.expand, v, false);
  n.expand->add_option("--path", v.path, "Staging or target path (volume_path)")->required();
  n.expand->add_option("--staging-path", v.staging_path);
  n.expand
      ->add_option("--capacity-bytes", v.capacity_bytes,
                   "capacity_range.required_bytes (0: whatever the LUN has now)")
      ->check(CLI::NonNegativeNumber);
  n.health = node->add_subcommand("health", "NodeGetVolumeHealth (CSI v1.13)");
  AddVolumeFlags(n.health, v, false);
  n.health->add_option("--path", v.path, "Only this publish (target) path");
  n.health->add_option("--staging-path", v.staging_path, "Only the staging path");
  n.storage_health = node->add_subcommand("storage-health", "NodeGetStorageHealth (CSI v1.13)");
  return n;
}

namespace {

// What stagehand's own driver says of its reasons (health/reason.h); nothing for another
// driver's.
std::string HealsNote(const std::string& reason) {
  const auto known = health::ReasonNamed(reason);
  if (!known) {
    return "";
  }
  return health::Info(*known).heals ? " [heals by itself]" : " [needs someone to act]";
}

// info, capabilities, stage, unstage, publish, unpublish.
int RunNodeCall(const NodeCommands& n, const Common& c, const VolumeArgs& v,
                csiclient::NodeClient& client) {
  if (*n.info) {
    auto answer = client.GetInfo(Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeGetInfoResponse& r = *answer;
    Print(c, r,
          "node_id: " + r.node_id() +
              "\nmax_volumes_per_node: " + std::to_string(r.max_volumes_per_node()) + "\n");
  } else if (*n.caps) {
    auto answer = client.GetCapabilities(Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeGetCapabilitiesResponse& r = *answer;
    std::string text;
    for (const auto& cap : r.capabilities()) {
      text += csi::v1::NodeServiceCapability::RPC::Type_Name(cap.rpc().type()) + "\n";
    }
    Print(c, r, text);
  } else if (*n.stage) {
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_staging_target_path(v.staging_path);
    if (!FillCapability(v, req.mutable_volume_capability()) ||
        !FillMaps(v, req.mutable_volume_context(), req.mutable_secrets())) {
      return kUsage;
    }
    auto answer = client.Stage(req, Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeStageVolumeResponse& r = *answer;
    Print(c, r, "staged " + v.volume_id + " at " + v.staging_path + "\n");
  } else if (*n.unstage) {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_staging_target_path(v.staging_path);
    auto answer = client.Unstage(req, Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeUnstageVolumeResponse& r = *answer;
    Print(c, r, "unstaged " + v.volume_id + "\n");
  } else if (*n.publish) {
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_staging_target_path(v.staging_path);
    req.set_target_path(v.target_path);
    req.set_readonly(v.readonly);
    if (!FillCapability(v, req.mutable_volume_capability()) ||
        !FillMaps(v, req.mutable_volume_context(), nullptr)) {
      return kUsage;
    }
    auto answer = client.Publish(req, Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodePublishVolumeResponse& r = *answer;
    Print(c, r, "published " + v.volume_id + " at " + v.target_path + "\n");
  } else if (*n.unpublish) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_target_path(v.target_path);
    auto answer = client.Unpublish(req, Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeUnpublishVolumeResponse& r = *answer;
    Print(c, r, "unpublished " + v.volume_id + " from " + v.target_path + "\n");
  }
  return 0;
}

// stats, expand, health, storage-health.
int RunNodeQuery(const NodeCommands& n, const Common& c, const VolumeArgs& v,
                 csiclient::NodeClient& client) {
  if (*n.stats) {
    csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(v.volume_id);
    req.set_volume_path(v.path);
    auto answer = client.GetVolumeStats(req, Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeGetVolumeStatsResponse& r = *answer;
    std::string text;
    for (const auto& u : r.usage()) {
      text += (u.unit() == csi::v1::VolumeUsage::BYTES ? "bytes " : "inodes") +
              std::string("  total=") + std::to_string(u.total()) +
              " used=" + std::to_string(u.used()) + " available=" + std::to_string(u.available()) +
              "\n";
    }
    if (r.has_volume_condition()) {
      text += std::string("condition: ") +
              (r.volume_condition().abnormal() ? "ABNORMAL" : "normal") + " (" +
              r.volume_condition().message() + ")\n";
    }
    Print(c, r, text);
  } else if (*n.expand) {
    csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_volume_path(v.path);
    req.set_staging_target_path(v.staging_path);
    if (v.capacity_bytes > 0) {
      req.mutable_capacity_range()->set_required_bytes(v.capacity_bytes);
    }
    auto answer = client.Expand(req, Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeExpandVolumeResponse& r = *answer;
    Print(c, r,
          "expanded " + v.volume_id + ": " + std::to_string(r.capacity_bytes()) + " bytes (" +
              HumanBytes(static_cast<uint64_t>(r.capacity_bytes())) + ")\n");
  } else if (*n.health) {
    csi::v1::NodeGetVolumeHealthRequest req;
    req.set_volume_id(v.volume_id);
    req.set_volume_publish_path(v.path);
    req.set_staging_target_path(v.staging_path);
    auto answer = client.GetVolumeHealth(req, Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeGetVolumeHealthResponse& r = *answer;
    std::string text;
    for (const auto& e : r.volume_health().health_statuses()) {
      text += absl::StrCat(csi::v1::VolumeHealthErrorType_Name(e.status()), " ", e.reason(), ": ",
                           e.message(), HealsNote(e.reason()), "\n");
    }
    Print(c, r, text.empty() ? v.volume_id + ": healthy\n" : text);
  } else if (*n.storage_health) {
    auto answer = client.GetStorageHealth(Timeout(c));
    if (!answer.ok()) {
      return Fail(answer.status());
    }
    const csi::v1::NodeGetStorageHealthResponse& r = *answer;
    std::string text;
    for (const auto& e : r.backend_health()) {
      text += absl::StrCat(csi::v1::StorageHealthErrorType_Name(e.status()), " ", e.reason(), ": ",
                           e.message(), "\n");
    }
    Print(c, r, text.empty() ? "storage: healthy\n" : text);
  }
  return 0;
}

}  // namespace

int RunNode(const NodeCommands& n, const Common& c, const VolumeArgs& v,
            csiclient::NodeClient& client) {
  if (*n.stats || *n.expand || *n.health || *n.storage_health) {
    return RunNodeQuery(n, c, v, client);
  }
  return RunNodeCall(n, c, v, client);
}

}  // namespace stagehand::ctl
