// stagehandctl: a CSI client for any node plugin endpoint, the agent API, and iSCSI checks, for
// debugging and demos.
//
//   stagehandctl --endpoint unix:///run/x/csi.sock identity info
//   stagehandctl ... node stage --volume-id v1 --staging-path /mnt/s -c targetPortal=127.0.0.1
//       -c iqn=iqn.2026-11.dev.stagehand:t1 -c lun=1 [--secrets-file chap.yaml] [--secret k=v]
//   stagehandctl [--agent-socket /run/stagehand/agent.sock] agent status|volumes [--watch]|plugins
//   stagehandctl iscsi discover --portal 10.0.0.5:3260
//   stagehandctl iscsi probe --portal 10.0.0.5 --iqn iqn.… --lun 1
//
// Exit status: 0 success, 1 the call failed ("error: NOT_FOUND: …"), 2 usage error.

#include <yaml-cpp/yaml.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include "ctl/agent_commands.h"
#include "ctl/cli.h"
#include "ctl/format.h"
#include "ctl/iscsi_probe.h"
#include "iscsi/target_spec.h"
#include "proto/agent.grpc.pb.h"
#include "proto/csi.grpc.pb.h"
#include <CLI/CLI.hpp>

namespace {

using stagehand::ctl::AgentArgs;
using stagehand::ctl::Common;
using stagehand::ctl::Context;
using stagehand::ctl::Fail;
using stagehand::ctl::kUsage;
using stagehand::ctl::OutputWidth;
using stagehand::ctl::Print;
using stagehand::ctl::Usage;

struct VolumeArgs {
  std::string volume_id;
  std::string staging_path;
  std::string target_path;
  std::string path;
  bool block = false;
  bool readonly = false;
  std::string fs_type;
  std::vector<std::string> mount_flags;
  std::string access_mode = "SINGLE_NODE_WRITER";
  std::vector<std::string> context;
  std::string secrets_file;
  std::vector<std::string> secrets;
  int64_t capacity_bytes = 0;
};

struct IscsiArgs {
  std::string portal;
  std::string iqn;
  uint32_t lun = 0;
  std::string initiator_name;
  std::string secrets_file;
  std::vector<std::string> secrets;
  int timeout_seconds = 10;  // --timeout when given: each iSCSI step.
};

// Stage secrets: --secrets-file first, then --secret (which wins).
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
  SH_RETURN_IF_ERROR(stagehand::ctl::ParseKeyValues(items, "--secret", &secrets));
  return secrets;
}

bool FillCapability(const VolumeArgs& v, csi::v1::VolumeCapability* cap) {
  if (v.block) {
    cap->mutable_block();
  } else {
    auto* m = cap->mutable_mount();
    m->set_fs_type(v.fs_type);
    for (const auto& f : v.mount_flags) {
      m->add_mount_flags(f);
    }
  }
  csi::v1::VolumeCapability::AccessMode::Mode mode{};
  if (!csi::v1::VolumeCapability::AccessMode::Mode_Parse(v.access_mode, &mode)) {
    std::cerr << "error: unknown --access-mode '" << v.access_mode << "'\n";
    return false;
  }
  cap->mutable_access_mode()->set_mode(mode);
  return true;
}

bool FillMaps(const VolumeArgs& v, google::protobuf::Map<std::string, std::string>* context,
              google::protobuf::Map<std::string, std::string>* secrets) {
  std::map<std::string, std::string> ctx;
  if (auto s = stagehand::ctl::ParseKeyValues(v.context, "--context", &ctx); !s.ok()) {
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

void AddIscsiFlags(CLI::App* cmd, IscsiArgs& a) {
  cmd->add_option("--portal", a.portal, "Target portal host[:port] (port 3260 by default)")
      ->required();
  cmd->add_option("--initiator-name", a.initiator_name,
                  "Initiator IQN (default: /etc/iscsi/initiatorname.iscsi, else "
                  "iqn.2026-11.dev.stagehand:stagehandctl)");
  cmd->add_option("--secrets-file", a.secrets_file, "YAML map of CHAP secrets");
  cmd->add_option("--secret", a.secrets, "CHAP secret key=value (repeatable)");
}

// ----- iscsi -----

// Resolves the flags shared by discover and probe. Returns a usage error message or "".
std::string ResolveIscsiArgs(IscsiArgs& a, std::map<std::string, std::string>* secrets) {
  if (a.initiator_name.empty()) {
    a.initiator_name = stagehand::ctl::DefaultInitiatorName();
  } else if (!stagehand::iscsi::IsValidTargetName(a.initiator_name)) {
    return absl::StrCat("--initiator-name '", a.initiator_name,
                        "' is not an iSCSI name (iqn.YYYY-MM.domain[:id])");
  }
  auto loaded = LoadSecrets(a.secrets_file, a.secrets);
  if (!loaded.ok()) {
    return std::string(loaded.status().message());
  }
  *secrets = std::move(*loaded);
  return "";
}

int IscsiDiscover(const Common& c, IscsiArgs& a) {
  std::map<std::string, std::string> secrets;
  if (std::string usage = ResolveIscsiArgs(a, &secrets); !usage.empty()) {
    return Usage(usage);
  }
  auto portal = stagehand::iscsi::ParsePortal(a.portal);
  if (!portal.ok()) {
    return Usage(std::string(portal.status().message()));
  }
  auto chap = stagehand::ctl::DiscoveryChap(secrets);
  if (!chap.ok()) {
    return Usage(std::string(chap.status().message()));
  }
  auto targets = stagehand::ctl::Discover(*portal, a.initiator_name, *chap, a.timeout_seconds);
  if (!targets.ok()) {
    return Fail(targets.status());
  }
  Print(c, stagehand::ctl::ToStruct(*targets), stagehand::ctl::FormatDiscovery(*targets));
  return 0;
}

int IscsiProbe(const Common& c, IscsiArgs& a) {
  std::map<std::string, std::string> secrets;
  if (std::string usage = ResolveIscsiArgs(a, &secrets); !usage.empty()) {
    return Usage(usage);
  }
  // The same validation as a volume context: portal, iqn, lun and CHAP pairs.
  auto spec =
      stagehand::iscsi::ParseTargetSpec({{stagehand::iscsi::kTargetPortalKey, a.portal},
                                         {stagehand::iscsi::kIqnKey, a.iqn},
                                         {stagehand::iscsi::kLunKey, std::to_string(a.lun)}},
                                        secrets);
  if (!spec.ok()) {
    return Usage(std::string(spec.status().message()));
  }
  stagehand::iscsi::LoginParams params;
  params.portal = spec->portals.front();
  params.iqn = spec->iqn;
  params.lun = spec->lun;
  params.initiator_name = a.initiator_name;
  params.chap = spec->session_chap;
  params.timeout_seconds = a.timeout_seconds;
  auto result = stagehand::ctl::Probe(params);
  if (!result.ok()) {
    return Fail(result.status());
  }
  Print(c, stagehand::ctl::ToStruct(*result), stagehand::ctl::FormatProbe(*result));
  return 0;
}

}  // namespace

// The flag table is long; CLI11 reports bad flags by exception inside CLI11_PARSE and anything
// else ends the process, as it should.
// NOLINTNEXTLINE(readability-function-size,bugprone-exception-escape)
int main(int argc, char** argv) {
  Common c;
  VolumeArgs v;
  AgentArgs ag;
  IscsiArgs is;
  CLI::App app{"stagehandctl: talk to a CSI node plugin, the stagehand agent, or an iSCSI target"};
  app.require_subcommand(1);
  app.add_option("--endpoint", c.endpoint,
                 "CSI endpoint, unix:///path/csi.sock (identity and node commands)");
  app.add_option("--agent-socket", c.agent_socket,
                 "Agent API socket, a path or unix:///path (agent commands)")
      ->capture_default_str();
  app.add_option("-o,--output", c.output, "text or json")->check(CLI::IsMember({"text", "json"}));
  auto* timeout = app.add_option("--timeout", c.timeout_seconds,
                                 "Per-call timeout in seconds (120; iSCSI steps: 10)");

  auto* identity = app.add_subcommand("identity", "CSI Identity service (needs --endpoint)");
  identity->require_subcommand(1);
  auto* id_info = identity->add_subcommand("info", "GetPluginInfo");
  auto* id_probe = identity->add_subcommand("probe", "Probe");

  auto* node = app.add_subcommand("node", "CSI Node service (needs --endpoint)");
  node->require_subcommand(1);
  auto* n_info = node->add_subcommand("info", "NodeGetInfo");
  auto* n_caps = node->add_subcommand("capabilities", "NodeGetCapabilities")->alias("caps");
  auto* n_stage = node->add_subcommand("stage", "NodeStageVolume");
  AddVolumeFlags(n_stage, v, true);
  n_stage->add_option("--staging-path", v.staging_path)->required();
  n_stage->add_option("--secrets-file", v.secrets_file, "YAML map of stage secrets (CHAP)");
  n_stage->add_option("--secret", v.secrets, "Stage secret key=value (repeatable; wins over file)");
  auto* n_unstage = node->add_subcommand("unstage", "NodeUnstageVolume");
  AddVolumeFlags(n_unstage, v, false);
  n_unstage->add_option("--staging-path", v.staging_path)->required();
  auto* n_publish = node->add_subcommand("publish", "NodePublishVolume");
  AddVolumeFlags(n_publish, v, true);
  n_publish->add_option("--staging-path", v.staging_path)->required();
  n_publish->add_option("--target-path", v.target_path)->required();
  n_publish->add_flag("--readonly", v.readonly);
  auto* n_unpublish = node->add_subcommand("unpublish", "NodeUnpublishVolume");
  AddVolumeFlags(n_unpublish, v, false);
  n_unpublish->add_option("--target-path", v.target_path)->required();
  auto* n_stats = node->add_subcommand("stats", "NodeGetVolumeStats");
  AddVolumeFlags(n_stats, v, false);
  n_stats->add_option("--path", v.path, "Staging or target path")->required();
  auto* n_expand = node->add_subcommand("expand", "NodeExpandVolume");
  AddVolumeFlags(n_expand, v, false);
  n_expand->add_option("--path", v.path, "Staging or target path (volume_path)")->required();
  n_expand->add_option("--staging-path", v.staging_path);
  n_expand
      ->add_option("--capacity-bytes", v.capacity_bytes,
                   "capacity_range.required_bytes (0: whatever the LUN has now)")
      ->check(CLI::NonNegativeNumber);

  auto* agent = app.add_subcommand("agent", "stagehand's agent API (see --agent-socket)");
  agent->require_subcommand(1);
  auto* a_status = agent->add_subcommand("status", "Agent status and problems");
  auto* a_volumes = agent->add_subcommand("volumes", "Declared volumes and their state");
  a_volumes->add_flag("-w,--watch", ag.watch, "Print again whenever the volumes change");
  a_volumes->add_flag("--wide", ag.wide, "Do not cut the error column to the terminal width");
  auto* a_plugins = agent->add_subcommand("plugins", "Registered CSI plugins");
  a_plugins->add_flag("--wide", ag.wide, "Do not cut the error column to the terminal width");

  auto* iscsi = app.add_subcommand("iscsi", "Check an iSCSI target from this process (libiscsi)");
  iscsi->require_subcommand(1);
  auto* i_discover = iscsi->add_subcommand("discover", "SendTargets discovery");
  AddIscsiFlags(i_discover, is);
  auto* i_probe = iscsi->add_subcommand("probe", "Log in; INQUIRY, READ CAPACITY, identifiers");
  AddIscsiFlags(i_probe, is);
  i_probe->add_option("--iqn", is.iqn, "Target name")->required();
  i_probe->add_option("--lun", is.lun, "LUN")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError with exit code 0; CLI11's own codes for the rest become 2.
    return app.exit(e) == 0 ? 0 : kUsage;
  }
  if (c.timeout_seconds <= 0) {
    return Usage("--timeout must be positive");
  }

  if (*agent) {
    auto stub = stagehand::agent::v1::Agent::NewStub(grpc::CreateChannel(
        stagehand::ctl::UnixTarget(c.agent_socket), grpc::InsecureChannelCredentials()));
    if (*a_status) {
      return stagehand::ctl::AgentStatus(c, *stub);
    }
    if (*a_volumes) {
      return stagehand::ctl::AgentVolumes(c, ag, *stub);
    }
    return stagehand::ctl::AgentPlugins(c, ag, *stub);
  }
  if (*iscsi) {
    if (timeout->count() > 0) {
      is.timeout_seconds = c.timeout_seconds;
    }
    return *i_discover ? IscsiDiscover(c, is) : IscsiProbe(c, is);
  }

  if (c.endpoint.empty()) {
    return Usage("--endpoint is required for the identity and node commands");
  }
  auto channel = grpc::CreateChannel(stagehand::ctl::UnixTarget(c.endpoint),
                                     grpc::InsecureChannelCredentials());
  auto identity_stub = csi::v1::Identity::NewStub(channel);
  auto node_stub = csi::v1::Node::NewStub(channel);

  if (*id_info) {
    csi::v1::GetPluginInfoResponse r;
    auto s = identity_stub->GetPluginInfo(Context(c).get(), {}, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r, r.name() + " " + r.vendor_version() + "\n");
  } else if (*id_probe) {
    csi::v1::ProbeResponse r;
    auto s = identity_stub->Probe(Context(c).get(), {}, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r, std::string(r.ready().value() ? "ready\n" : "not ready\n"));
  } else if (*n_info) {
    csi::v1::NodeGetInfoResponse r;
    auto s = node_stub->NodeGetInfo(Context(c).get(), {}, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r,
          "node_id: " + r.node_id() +
              "\nmax_volumes_per_node: " + std::to_string(r.max_volumes_per_node()) + "\n");
  } else if (*n_caps) {
    csi::v1::NodeGetCapabilitiesResponse r;
    auto s = node_stub->NodeGetCapabilities(Context(c).get(), {}, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    std::string text;
    for (const auto& cap : r.capabilities()) {
      text += csi::v1::NodeServiceCapability::RPC::Type_Name(cap.rpc().type()) + "\n";
    }
    Print(c, r, text);
  } else if (*n_stage) {
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_staging_target_path(v.staging_path);
    if (!FillCapability(v, req.mutable_volume_capability()) ||
        !FillMaps(v, req.mutable_volume_context(), req.mutable_secrets())) {
      return kUsage;
    }
    csi::v1::NodeStageVolumeResponse r;
    auto s = node_stub->NodeStageVolume(Context(c).get(), req, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r, "staged " + v.volume_id + " at " + v.staging_path + "\n");
  } else if (*n_unstage) {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_staging_target_path(v.staging_path);
    csi::v1::NodeUnstageVolumeResponse r;
    auto s = node_stub->NodeUnstageVolume(Context(c).get(), req, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r, "unstaged " + v.volume_id + "\n");
  } else if (*n_publish) {
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_staging_target_path(v.staging_path);
    req.set_target_path(v.target_path);
    req.set_readonly(v.readonly);
    if (!FillCapability(v, req.mutable_volume_capability()) ||
        !FillMaps(v, req.mutable_volume_context(), nullptr)) {
      return kUsage;
    }
    csi::v1::NodePublishVolumeResponse r;
    auto s = node_stub->NodePublishVolume(Context(c).get(), req, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r, "published " + v.volume_id + " at " + v.target_path + "\n");
  } else if (*n_unpublish) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_target_path(v.target_path);
    csi::v1::NodeUnpublishVolumeResponse r;
    auto s = node_stub->NodeUnpublishVolume(Context(c).get(), req, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r, "unpublished " + v.volume_id + " from " + v.target_path + "\n");
  } else if (*n_stats) {
    csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(v.volume_id);
    req.set_volume_path(v.path);
    csi::v1::NodeGetVolumeStatsResponse r;
    auto s = node_stub->NodeGetVolumeStats(Context(c).get(), req, &r);
    if (!s.ok()) {
      return Fail(s);
    }
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
  } else if (*n_expand) {
    csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(v.volume_id);
    req.set_volume_path(v.path);
    req.set_staging_target_path(v.staging_path);
    if (v.capacity_bytes > 0) {
      req.mutable_capacity_range()->set_required_bytes(v.capacity_bytes);
    }
    csi::v1::NodeExpandVolumeResponse r;
    auto s = node_stub->NodeExpandVolume(Context(c).get(), req, &r);
    if (!s.ok()) {
      return Fail(s);
    }
    Print(c, r,
          "expanded " + v.volume_id + ": " + std::to_string(r.capacity_bytes()) + " bytes (" +
              stagehand::ctl::HumanBytes(static_cast<uint64_t>(r.capacity_bytes())) + ")\n");
  }
  return 0;
}
