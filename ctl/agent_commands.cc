#include "ctl/agent_commands.h"

#include <chrono>
#include <ctime>
#include <iostream>
#include <string>
#include <thread>

#include "ctl/format.h"

namespace stagehand::ctl {
namespace {

constexpr uint32_t kWatchWaitMs = 30'000;

std::string Now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm local{};
  std::strftime(buf, sizeof(buf), "%H:%M:%S", localtime_r(&t, &local));
  return buf;
}

}  // namespace

int AgentStatus(const Common& c, stagehand::agent::v1::Agent::Stub& stub) {
  stagehand::agent::v1::AgentStatus r;
  auto s = stub.GetStatus(Context(c).get(), {}, &r);
  if (!s.ok()) {
    return Fail(s);
  }
  Print(c, r, FormatStatus(r));
  return 0;
}

int AgentPlugins(const Common& c, const AgentArgs& a, stagehand::agent::v1::Agent::Stub& stub) {
  stagehand::agent::v1::ListPluginsResponse r;
  auto s = stub.ListPlugins(Context(c).get(), {}, &r);
  if (!s.ok()) {
    return Fail(s);
  }
  Print(c, r, FormatPlugins(r, OutputWidth(a.wide)));
  return 0;
}

int AgentVolumes(const Common& c, const AgentArgs& a, stagehand::agent::v1::Agent::Stub& stub) {
  stagehand::agent::v1::ListVolumesRequest req;
  stagehand::agent::v1::ListVolumesResponse r;
  auto s = stub.ListVolumes(Context(c).get(), req, &r);
  if (!s.ok()) {
    return Fail(s);
  }
  if (!a.watch) {
    Print(c, r, FormatVolumes(r, OutputWidth(a.wide)));
    return 0;
  }
  // Long poll: each call answers when the generation passes ours, or after kWatchWaitMs with
  // the same generation (nothing to print). Runs until interrupted.
  bool unavailable = false;
  for (;;) {
    if (c.output != "json") {
      std::cout << "--- " << Now() << " generation " << r.generation() << "\n";
    }
    Print(c, r, FormatVolumes(r, OutputWidth(a.wide)));
    const uint64_t shown = r.generation();
    for (;;) {
      req.set_after_generation(shown);
      req.set_wait_ms(kWatchWaitMs);
      r.Clear();
      s = stub.ListVolumes(Context(c, static_cast<int>(kWatchWaitMs)).get(), req, &r);
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
        // The agent restarts: say so once, and show whatever it has when it is back (its
        // generation starts again, so do not wait for ours).
        if (!unavailable) {
          std::cerr << "agent unavailable (" << s.error_message() << "); retrying\n";
          unavailable = true;
        }
        std::this_thread::sleep_for(std::chrono::seconds(1));
        req.set_after_generation(0);
        req.set_wait_ms(0);
        r.Clear();
        s = stub.ListVolumes(Context(c).get(), req, &r);
        if (s.ok()) {
          unavailable = false;
          break;
        }
        continue;
      }
      if (!s.ok()) {
        return Fail(s);
      }
      if (r.generation() != shown) {
        break;
      }
    }
  }
}

}  // namespace stagehand::ctl
