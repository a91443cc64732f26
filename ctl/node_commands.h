#pragma once

// stagehandctl node ...: the CSI Node service of any plugin, one RPC per command.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "csiclient/node_client.h"
#include "ctl/cli.h"
#include <CLI/CLI.hpp>

namespace stagehand::ctl {

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

struct NodeCommands {
  CLI::App* info = nullptr;
  CLI::App* caps = nullptr;
  CLI::App* stage = nullptr;
  CLI::App* unstage = nullptr;
  CLI::App* publish = nullptr;
  CLI::App* unpublish = nullptr;
  CLI::App* stats = nullptr;
  CLI::App* expand = nullptr;
  CLI::App* health = nullptr;
  CLI::App* storage_health = nullptr;
};

// Stage (or discovery) secrets: --secrets-file first, then --secret (which wins).
absl::StatusOr<std::map<std::string, std::string>> LoadSecrets(
    const std::string& file, const std::vector<std::string>& items);

// Adds `node` and its commands to `app`; their flags fill `v`.
NodeCommands AddNodeCommands(CLI::App& app, VolumeArgs& v);

// Runs the node command that was given; its exit status.
int RunNode(const NodeCommands& n, const Common& c, const VolumeArgs& v,
            csiclient::NodeClient& client);

}  // namespace stagehand::ctl
