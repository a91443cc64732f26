#pragma once

// stagehandctl agent status|plugins|volumes: the agent API.

#include "ctl/cli.h"
#include "proto/agent.grpc.pb.h"

namespace stagehand::ctl {

struct AgentArgs {
  bool watch = false;
  bool wide = false;
};

int AgentStatus(const Common& c, stagehand::agent::v1::Agent::Stub& stub);
int AgentPlugins(const Common& c, const AgentArgs& a, stagehand::agent::v1::Agent::Stub& stub);
// With --watch: prints again whenever the volumes change, until interrupted.
int AgentVolumes(const Common& c, const AgentArgs& a, stagehand::agent::v1::Agent::Stub& stub);

}  // namespace stagehand::ctl
