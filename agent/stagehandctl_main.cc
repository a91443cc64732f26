// stagehandctl: a CSI client for any node plugin endpoint, for debugging and demos.
//
//   stagehandctl --endpoint unix:///run/x/csi.sock identity info
//   stagehandctl ... node stage --volume-id v1 --staging-path /mnt/s -c targetPortal=127.0.0.1
//       -c iqn=iqn.2026-11.dev.stagehand:t1 -c lun=1 [--secrets-file chap.yaml]

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "proto/csi.grpc.pb.h"
#include <CLI/CLI.hpp>

namespace {

struct Common {
  std::string endpoint;
  std::string output = "text";
  int timeout_seconds = 120;
};

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
};

int Fail(const grpc::Status& s) {
  std::cerr << "error: " << s.error_code() << " ("
            << (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT      ? "InvalidArgument"
                : s.error_code() == grpc::StatusCode::NOT_FOUND           ? "NotFound"
                : s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ? "FailedPrecondition"
                : s.error_code() == grpc::StatusCode::ALREADY_EXISTS      ? "AlreadyExists"
                : s.error_code() == grpc::StatusCode::UNAUTHENTICATED     ? "Unauthenticated"
                : s.error_code() == grpc::StatusCode::UNAVAILABLE         ? "Unavailable"
                : s.error_code() == grpc::StatusCode::ABORTED             ? "Aborted"
                                                                          : "error")
            << "): " << s.error_message() << "\n";
  return 1;
}

template <typename Msg>
void Print(const Common& c, const Msg& m, const std::string& text) {
  if (c.output == "json") {
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.add_whitespace = true;
    o.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(m, &json, o);
    std::cout << json;
  } else {
    std::cout << text;
  }
}

std::unique_ptr<grpc::ClientContext> Context(const Common& c) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(c.timeout_seconds));
  return ctx;
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
  for (const auto& kv : v.context) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      std::cerr << "error: --context '" << kv << "' must be key=value\n";
      return false;
    }
    (*context)[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!v.secrets_file.empty() && secrets != nullptr) {
    try {
      YAML::Node node = YAML::LoadFile(v.secrets_file);
      if (!node.IsMap()) {
        std::cerr << "error: --secrets-file must hold a YAML map of key: value\n";
        return false;
      }
      for (const auto& kv : node) {
        (*secrets)[kv.first.as<std::string>()] = kv.second.as<std::string>();
      }
    } catch (const YAML::Exception& e) {
      std::cerr << "error: --secrets-file '" << v.secrets_file << "': " << e.what() << "\n";
      return false;
    }
  }
  return true;
}

void AddVolumeFlags(CLI::App* cmd, VolumeArgs& v, bool capability) {
  cmd->add_option("--volume-id", v.volume_id, "Volume ID")->required();
  if (capability) {
    cmd->add_flag("--block", v.block, "Raw block access instead of a filesystem");
    cmd->add_option("--fs-type", v.fs_type, "ext4 (default) or xfs");
    cmd->add_option("--mount-flag", v.mount_flags, "Mount flag (repeatable)");
    cmd->add_option("--access-mode", v.access_mode, "CSI access mode")->capture_default_str();
    cmd->add_option("-c,--context", v.context, "volume_context key=value (repeatable)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Common c;
  VolumeArgs v;
  CLI::App app{"stagehandctl: talk to a CSI node plugin"};
  app.require_subcommand(1);
  app.add_option("--endpoint", c.endpoint, "CSI endpoint, unix:///path/csi.sock")->required();
  app.add_option("-o,--output", c.output, "text or json")->check(CLI::IsMember({"text", "json"}));
  app.add_option("--timeout", c.timeout_seconds, "Per-call timeout in seconds");

  auto* identity = app.add_subcommand("identity", "CSI Identity service");
  identity->require_subcommand(1);
  auto* id_info = identity->add_subcommand("info", "GetPluginInfo");
  auto* id_probe = identity->add_subcommand("probe", "Probe");
  auto* node = app.add_subcommand("node", "CSI Node service");
  node->require_subcommand(1);
  auto* n_info = node->add_subcommand("info", "NodeGetInfo");
  auto* n_caps = node->add_subcommand("capabilities", "NodeGetCapabilities");
  auto* n_stage = node->add_subcommand("stage", "NodeStageVolume");
  AddVolumeFlags(n_stage, v, true);
  n_stage->add_option("--staging-path", v.staging_path)->required();
  n_stage->add_option("--secrets-file", v.secrets_file, "YAML map of stage secrets (CHAP)");
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
  CLI11_PARSE(app, argc, argv);

  std::string target = c.endpoint;
  if (target.starts_with("unix:///")) {
    target = "unix:" + target.substr(7);
  }
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
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
      return 2;
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
      return 2;
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
  }
  return 0;
}
