#pragma once

// Waits for block devices to appear, change or go, driven by udev events (libudev monitor):
// create the watch before the action (login, scan, map, delete) so that no event is missed,
// then wait until a check over sysfs holds. Bounded; no sleep loops.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"

namespace stagehand::transport::kernel {

class DeviceWatch {
 public:
  virtual ~DeviceWatch() = default;

  // Runs `check` now and after every block-device event until it returns a value, or until
  // `timeout` passes: DeadlineExceeded naming `what`.
  virtual absl::StatusOr<std::string> WaitFor(
      const std::function<std::optional<std::string>()>& check, std::chrono::milliseconds timeout,
      std::string_view what) = 0;

  // True when udev has processed the device at `syspath` (its rules ran: /dev links exist and
  // multipathd has seen it).
  virtual bool Processed(const std::string& syspath) = 0;
};

// A watch on udev's block-subsystem events (after udev's rules ran).
absl::StatusOr<std::unique_ptr<DeviceWatch>> CreateUdevDeviceWatch();

}  // namespace stagehand::transport::kernel
