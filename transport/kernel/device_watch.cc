#include "transport/kernel/device_watch.h"

#include <libudev.h>
#include <poll.h>

#include <cerrno>

#include <absl/strings/str_cat.h>

#include "base/c_handle.h"
#include "base/status.h"

namespace stagehand::transport::kernel {
namespace {

using UdevHandle = CHandle<udev, &udev_unref>;
using UdevMonitorHandle = CHandle<udev_monitor, &udev_monitor_unref>;
using UdevDeviceHandle = CHandle<udev_device, &udev_device_unref>;

// A check also runs at least this often, in case an event was dropped (the monitor's socket
// buffer overflowed): a safety net, not the mechanism.
constexpr std::chrono::milliseconds kRecheck{1000};

class UdevDeviceWatch : public DeviceWatch {
 public:
  UdevDeviceWatch(UdevHandle u, UdevMonitorHandle m)
      : udev_(std::move(u)), monitor_(std::move(m)) {}

  absl::StatusOr<std::string> WaitFor(const std::function<std::optional<std::string>()>& check,
                                      std::chrono::milliseconds timeout,
                                      std::string_view what) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (auto found = check()) {
        return *found;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("timed out after ", static_cast<double>(timeout.count()) / 1000.0,
                         " s waiting for ", ToAbsl(what), " (is systemd-udevd running?)"));
      }
      const auto left =
          std::min(kRecheck, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      pollfd p{udev_monitor_get_fd(monitor_.get()), POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
      if (n < 0 && errno != EINTR) {
        return ErrnoStatus(errno, "poll the udev monitor");
      }
      // Drain what arrived; the check looks at sysfs and udev's database, not at the events.
      while (n > 0) {
        if (!UdevDeviceHandle(udev_monitor_receive_device(monitor_.get()))) {
          break;
        }
      }
    }
  }

  bool Processed(const std::string& syspath) override {
    UdevDeviceHandle d(udev_device_new_from_syspath(udev_.get(), syspath.c_str()));
    return d != nullptr && udev_device_get_is_initialized(d.get()) > 0;
  }

 private:
  UdevHandle udev_;  // Declared first: outlives the monitor made from it.
  UdevMonitorHandle monitor_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWatch>> CreateUdevDeviceWatch() {
  UdevHandle u(udev_new());
  if (!u) {
    return absl::InternalError("udev_new failed");
  }
  UdevMonitorHandle m(udev_monitor_new_from_netlink(u.get(), "udev"));
  if (!m) {
    return absl::InternalError("cannot open a udev monitor (netlink)");
  }
  if (udev_monitor_filter_add_match_subsystem_devtype(m.get(), "block", nullptr) < 0 ||
      udev_monitor_enable_receiving(m.get()) < 0) {
    return absl::InternalError("cannot start the udev monitor for block devices");
  }
  return std::make_unique<UdevDeviceWatch>(std::move(u), std::move(m));
}

}  // namespace stagehand::transport::kernel
