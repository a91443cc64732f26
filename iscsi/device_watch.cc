#include "iscsi/device_watch.h"

#include <libudev.h>
#include <poll.h>

#include <cerrno>

#include <absl/strings/str_cat.h>

#include "base/status.h"

namespace stagehand::iscsi {
namespace {

// A check also runs at least this often, in case an event was dropped (the monitor's socket
// buffer overflowed): a safety net, not the mechanism.
constexpr std::chrono::milliseconds kRecheck{1000};

class UdevDeviceWatch : public DeviceWatch {
 public:
  UdevDeviceWatch(udev* u, udev_monitor* m) : udev_(u), monitor_(m) {}

  ~UdevDeviceWatch() override {
    udev_monitor_unref(monitor_);
    udev_unref(udev_);
  }

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
            absl::StrCat("timed out after ", timeout.count() / 1000.0, " s waiting for ",
                         ToAbsl(what), " (is systemd-udevd running?)"));
      }
      const auto left =
          std::min(kRecheck, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      pollfd p{udev_monitor_get_fd(monitor_), POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
      if (n < 0 && errno != EINTR) {
        return ErrnoStatus(errno, "poll the udev monitor");
      }
      // Drain what arrived; the check looks at sysfs and udev's database, not at the events.
      while (n > 0) {
        udev_device* d = udev_monitor_receive_device(monitor_);
        if (d == nullptr) {
          break;
        }
        udev_device_unref(d);
      }
    }
  }

  bool Processed(const std::string& syspath) override {
    udev_device* d = udev_device_new_from_syspath(udev_, syspath.c_str());
    if (d == nullptr) {
      return false;
    }
    const bool initialized = udev_device_get_is_initialized(d) > 0;
    udev_device_unref(d);
    return initialized;
  }

 private:
  udev* udev_;
  udev_monitor* monitor_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWatch>> CreateUdevDeviceWatch() {
  udev* u = udev_new();
  if (u == nullptr) {
    return absl::InternalError("udev_new failed");
  }
  udev_monitor* m = udev_monitor_new_from_netlink(u, "udev");
  if (m == nullptr) {
    udev_unref(u);
    return absl::InternalError("cannot open a udev monitor (netlink)");
  }
  if (udev_monitor_filter_add_match_subsystem_devtype(m, "block", nullptr) < 0 ||
      udev_monitor_enable_receiving(m) < 0) {
    udev_monitor_unref(m);
    udev_unref(u);
    return absl::InternalError("cannot start the udev monitor for block devices");
  }
  return std::make_unique<UdevDeviceWatch>(u, m);
}

}  // namespace stagehand::iscsi
