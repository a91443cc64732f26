// stagehandctl: a CSI client for any node plugin endpoint, the agent API, and iSCSI checks, for
// debugging and demos.
//
//   stagehandctl --endpoint unix:///run/x/csi.sock identity info
//   stagehandctl ... node stage --volume-id v1 --staging-path /mnt/s -c targetPortal=127.0.0.1
//       -c iqn=iqn.2026-11.dev.stagehand:t1 -c lun=1 [--secrets-file chap.yaml] [--secret k=v]
//   stagehandctl [--agent-socket /run/stagehand/agent.sock] agent status|volumes [--watch]|plugins
//   stagehandctl iscsi discover --portal 10.0.0.5:3260
//   stagehandctl iscsi probe --portal 10.0.0.5 --iqn iqn.… --lun 1
//   stagehandctl iscsi reservation --portal 10.0.0.5 --iqn iqn.… --lun 1 [--node-id n1 ...]
//       [--release-node n1 --node-is-dead]
//   stagehandctl iscsi key --node-id n1 [--node-id n2 ...]
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
#include "ctl/iscsi_reservation.h"
#include "ctl/node_commands.h"
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
using stagehand::ctl::Print;
using stagehand::ctl::Usage;

struct IscsiArgs {
  std::string portal;
  std::string iqn;
  uint32_t lun = 0;
  std::string initiator_name;
  std::string secrets_file;
  std::vector<std::string> secrets;
  int timeout_seconds = 10;           // --timeout when given: each iSCSI step.
  std::vector<std::string> node_ids;  // Nodes to name reservation keys by.
  std::string release_node;           // reservation: the dead node to release the LUN of.
  bool node_is_dead = false;          // Its confirmation.
  std::string take_over_for;          // reservation: the node to reserve the LUN for.
  bool holder_is_dead = false;        // Its confirmation.
};

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
  auto loaded = stagehand::ctl::LoadSecrets(a.secrets_file, a.secrets);
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

// The login for `probe` and `reservation`, validated as a volume context is (portal, iqn, lun
// and CHAP pairs). Returns a usage error message or "".
std::string ResolveLogin(IscsiArgs& a, stagehand::iscsi::LoginParams* params) {
  std::map<std::string, std::string> secrets;
  if (std::string usage = ResolveIscsiArgs(a, &secrets); !usage.empty()) {
    return usage;
  }
  auto spec =
      stagehand::iscsi::ParseTargetSpec({{stagehand::iscsi::kTargetPortalKey, a.portal},
                                         {stagehand::iscsi::kIqnKey, a.iqn},
                                         {stagehand::iscsi::kLunKey, std::to_string(a.lun)}},
                                        secrets);
  if (!spec.ok()) {
    return std::string(spec.status().message());
  }
  params->portal = spec->portals.front();
  params->iqn = spec->iqn;
  params->lun = spec->lun;
  params->initiator_name = a.initiator_name;
  params->chap = spec->session_chap;
  params->timeout_seconds = a.timeout_seconds;
  return "";
}

int IscsiProbe(const Common& c, IscsiArgs& a) {
  stagehand::iscsi::LoginParams params;
  if (std::string usage = ResolveLogin(a, &params); !usage.empty()) {
    return Usage(usage);
  }
  auto result = stagehand::ctl::Probe(params);
  if (!result.ok()) {
    return Fail(result.status());
  }
  Print(c, stagehand::ctl::ToStruct(*result), stagehand::ctl::FormatProbe(*result));
  return 0;
}

int IscsiReservation(const Common& c, IscsiArgs& a) {
  stagehand::iscsi::LoginParams params;
  if (std::string usage = ResolveLogin(a, &params); !usage.empty()) {
    return Usage(usage);
  }
  if (!a.release_node.empty() && !a.node_is_dead) {
    return Usage(
        "--release-node fences that node: add --node-is-dead once you know it is (powered off, "
        "cut off from the storage for good)");
  }
  if (!a.take_over_for.empty() && !a.holder_is_dead) {
    return Usage(
        "--take-over-for fences the node that holds the LUN: add --holder-is-dead once you know "
        "it is (powered off, cut off from the storage for good)");
  }
  if (!a.take_over_for.empty() && !a.release_node.empty()) {
    return Usage("give --release-node or --take-over-for, not both");
  }
  auto state = !a.release_node.empty()    ? stagehand::ctl::ReleaseNode(params, a.release_node)
               : !a.take_over_for.empty() ? stagehand::ctl::TakeOverFor(params, a.take_over_for)
                                          : stagehand::ctl::ReadReservations(params);
  if (!state.ok()) {
    return Fail(state.status());
  }
  const stagehand::ctl::ReservationReport report{.portal = params.portal.ToString(),
                                                 .iqn = params.iqn,
                                                 .lun = params.lun,
                                                 .state = *state,
                                                 .node_ids = a.node_ids};
  Print(c, stagehand::ctl::ToStruct(report), stagehand::ctl::FormatReservations(report));
  return 0;
}

struct IscsiCommands {
  CLI::App* iscsi = nullptr;
  CLI::App* discover = nullptr;
  CLI::App* probe = nullptr;
  CLI::App* reservation = nullptr;
  CLI::App* key = nullptr;
};

IscsiCommands AddIscsiCommands(CLI::App& app, IscsiArgs& is) {
  IscsiCommands cmds;
  cmds.iscsi = app.add_subcommand("iscsi", "Check an iSCSI target from this process (libiscsi)");
  cmds.iscsi->require_subcommand(1);
  cmds.discover = cmds.iscsi->add_subcommand("discover", "SendTargets discovery");
  AddIscsiFlags(cmds.discover, is);
  cmds.probe = cmds.iscsi->add_subcommand("probe", "Log in; INQUIRY, READ CAPACITY, identifiers");
  AddIscsiFlags(cmds.probe, is);
  cmds.probe->add_option("--iqn", is.iqn, "Target name")->required();
  cmds.probe->add_option("--lun", is.lun, "LUN")->required();
  cmds.reservation = cmds.iscsi->add_subcommand(
      "reservation", "Log in; the LUN's persistent reservation and registered keys");
  AddIscsiFlags(cmds.reservation, is);
  cmds.reservation->add_option("--iqn", is.iqn, "Target name")->required();
  cmds.reservation->add_option("--lun", is.lun, "LUN")->required();
  cmds.reservation->add_option("--node-id", is.node_ids,
                               "Name the keys of this node id (repeatable)");
  cmds.reservation->add_option(
      "--release-node", is.release_node,
      "Remove this node id's registrations and reservation (it is fenced), for a node known dead");
  cmds.reservation->add_flag("--node-is-dead", is.node_is_dead,
                             "Confirms --release-node: the node is dead");
  cmds.reservation->add_option("--take-over-for", is.take_over_for,
                               "Reserve the LUN for this node id, preempting the node that holds "
                               "it (fenced), for a holder known dead");
  cmds.reservation->add_flag("--holder-is-dead", is.holder_is_dead,
                             "Confirms --take-over-for: the holder is dead");
  cmds.key = cmds.iscsi->add_subcommand(
      "key", "The reservation key prefix stagehand registers a node id under (no target)");
  cmds.key->add_option("--node-id", is.node_ids, "Node id (repeatable)")->required();
  return cmds;
}

}  // namespace

// CLI11 reports bad flags by exception inside app.parse (caught below); anything else ends the
// process, as it should.
// NOLINTNEXTLINE(bugprone-exception-escape)
int main(int argc, char** argv) {
  Common c;
  AgentArgs ag;
  IscsiArgs is;
  stagehand::ctl::VolumeArgs v;
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

  const stagehand::ctl::NodeCommands node = stagehand::ctl::AddNodeCommands(app, v);

  auto* agent = app.add_subcommand("agent", "stagehand's agent API (see --agent-socket)");
  agent->require_subcommand(1);
  auto* a_status = agent->add_subcommand("status", "Agent status and problems");
  auto* a_volumes = agent->add_subcommand("volumes", "Declared volumes and their state");
  a_volumes->add_flag("-w,--watch", ag.watch, "Print again whenever the volumes change");
  a_volumes->add_flag("--wide", ag.wide, "Do not cut the error column to the terminal width");
  auto* a_plugins = agent->add_subcommand("plugins", "Registered CSI plugins");
  a_plugins->add_flag("--wide", ag.wide, "Do not cut the error column to the terminal width");

  const IscsiCommands iscsi = AddIscsiCommands(app, is);

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
  if (*iscsi.iscsi) {
    if (timeout->count() > 0) {
      is.timeout_seconds = c.timeout_seconds;
    }
    if (*iscsi.key) {
      Print(c, stagehand::ctl::NodeKeysToStruct(is.node_ids),
            stagehand::ctl::FormatNodeKeys(is.node_ids));
      return 0;
    }
    if (*iscsi.reservation) {
      return IscsiReservation(c, is);
    }
    return *iscsi.discover ? IscsiDiscover(c, is) : IscsiProbe(c, is);
  }

  if (c.endpoint.empty()) {
    return Usage("--endpoint is required for the identity and node commands");
  }
  auto channel = grpc::CreateChannel(stagehand::ctl::UnixTarget(c.endpoint),
                                     grpc::InsecureChannelCredentials());
  auto identity_stub = csi::v1::Identity::NewStub(channel);

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
  } else {
    // A plugin that is not there fails at once (Unavailable), as csc's calls do.
    stagehand::csiclient::NodeClient::Options options;
    options.wait_for_ready = false;
    stagehand::csiclient::NodeClient client("", stagehand::ctl::UnixTarget(c.endpoint), options);
    return stagehand::ctl::RunNode(node, c, v, client);
  }
  return 0;
}
