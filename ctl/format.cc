#include "ctl/format.h"

#include <algorithm>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "iscsi/persistent_reservation.h"

namespace stagehand::ctl {
namespace {

constexpr size_t kMinLastColumn = 24;

std::string OrDash(const std::string& s) {
  return s.empty() ? "-" : s;
}

std::string YesNo(bool b) {
  return b ? "yes" : "no";
}

// The one-line reason a volume is not where it should be, most specific first.
std::string VolumeProblem(const agent::v1::Volume& v) {
  if (!v.blocked().empty()) {
    return "blocked: " + v.blocked();
  }
  if (!v.last_error().empty()) {
    return v.last_error();
  }
  if (!v.condition().empty()) {
    return "abnormal: " + v.condition();
  }
  if (!v.manifest_error().empty()) {
    return "manifest: " + v.manifest_error();
  }
  if (!v.in_flight().empty()) {
    return "(in flight: " + v.in_flight() + ")";
  }
  return "-";
}

}  // namespace

std::string UnixTarget(std::string_view endpoint) {
  std::string_view path = endpoint;
  if (path.starts_with("unix://")) {
    path.remove_prefix(7);
  } else if (path.starts_with("unix:")) {
    path.remove_prefix(5);
  } else if (!path.starts_with("/") && !path.starts_with(".")) {
    return std::string(endpoint);
  }
  return absl::StrCat("unix:", ToAbsl(path));
}

absl::Status ParseKeyValues(const std::vector<std::string>& items, std::string_view flag,
                            std::map<std::string, std::string>* out) {
  for (const auto& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(ToAbsl(flag), " '", item, "' must be key=value"));
    }
    (*out)[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return absl::OkStatus();
}

std::string Truncate(std::string_view s, size_t width) {
  std::string one(s);
  std::replace_if(
      one.begin(), one.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  if (width == 0 || one.size() <= width) {
    return one;
  }
  if (width <= 3) {
    return one.substr(0, width);
  }
  return one.substr(0, width - 3) + "...";
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    return absl::StrCat(bytes, " B");
  }
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string Table::Render(size_t max_width) const {
  const size_t columns = rows_[0].size();
  std::vector<size_t> widths(columns, 0);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < columns; ++i) {
      widths[i] = std::max(widths[i], Truncate(row[i], 0).size());
    }
  }
  size_t last_width = 0;  // No limit.
  if (max_width > 0) {
    size_t prefix = 0;
    for (size_t i = 0; i + 1 < columns; ++i) {
      prefix += widths[i] + 2;
    }
    last_width = max_width > prefix + kMinLastColumn ? max_width - prefix : kMinLastColumn;
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i + 1 < columns; ++i) {
      std::string cell = Truncate(row[i], 0);
      cell.resize(widths[i], ' ');
      absl::StrAppend(&line, cell, "  ");
    }
    absl::StrAppend(&line, Truncate(row[columns - 1], last_width));
    line = std::string(absl::StripTrailingAsciiWhitespace(line));
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string FormatStatus(const agent::v1::AgentStatus& s) {
  Table t({"", ""});
  t.AddRow({"version:", OrDash(s.version())});
  t.AddRow({"mode:", OrDash(s.mode())});
  t.AddRow({"node id:", OrDash(s.node_id())});
  t.AddRow({"driver:", OrDash(s.driver_name())});
  t.AddRow({"ready:", s.ready() || s.not_ready_reason().empty()
                          ? YesNo(s.ready())
                          : absl::StrCat("no (", s.not_ready_reason(), ")")});
  t.AddRow({"volumes:", absl::StrCat(s.volumes(), " declared, ", s.volumes_published(),
                                     " published, ", s.volumes_failing(), " failing")});
  t.AddRow({"plugins:",
            absl::StrCat(s.plugins(), " registered, ", s.plugins_unhealthy(), " unhealthy")});
  t.AddRow({"manifest dir:", OrDash(s.manifest_dir())});
  t.AddRow({"sessions run:", s.session_launcher() == "systemd"
                                 ? "as systemd units (stagehand-session-*.service)"
                                 : OrDash(s.session_launcher())});
  t.AddRow({"transport:", OrDash(s.iscsi_transport())});
  if (s.has_registrar()) {
    const auto& r = s.registrar();
    std::string reg = r.registered() ? "registered"
                      : r.notified() ? "rejected"
                                     : "waiting for the registering side";
    if (!r.socket_path().empty()) {
      absl::StrAppend(&reg, " (socket ", r.socket_path(), ")");
    }
    if (!r.last_error().empty()) {
      absl::StrAppend(&reg, "; last rejection: ", r.last_error(), " (", r.rejections(),
                      r.rejections() == 1 ? " time)" : " times)");
    }
    t.AddRow({"registrar:", reg});
  } else {
    t.AddRow({"registrar:", "-"});
  }
  // Drop the empty header line.
  std::string out = t.Render(0);
  out.erase(0, out.find('\n') + 1);
  if (s.problems().empty()) {
    absl::StrAppend(&out, "problems:      none\n");
  } else {
    absl::StrAppend(&out, "problems:\n");
    for (const auto& p : s.problems()) {
      absl::StrAppend(&out, "  - ", Truncate(p, 0), "\n");
    }
  }
  return out;
}

std::string FormatVolumes(const agent::v1::ListVolumesResponse& r, size_t max_width) {
  std::string out;
  if (!r.ready()) {
    out = "(the agent has not finished its first reconcile yet)\n";
  }
  Table t({"NAME", "DRIVER", "PHASE", "TARGETS", "ATTEMPTS", "LAST ERROR / BLOCKED"});
  for (const auto& v : r.volumes()) {
    const auto published = std::count_if(
        v.targets().begin(), v.targets().end(),
        [](const agent::v1::VolumeTarget& target) { return target.state() == "published"; });
    t.AddRow({v.name(), OrDash(v.driver()), OrDash(v.phase()),
              absl::StrCat(published, "/", v.targets_size()), absl::StrCat(v.attempts()),
              VolumeProblem(v)});
  }
  absl::StrAppend(&out, t.Render(max_width));
  if (r.volumes().empty()) {
    absl::StrAppend(&out, "(no volumes declared)\n");
  }
  std::string paths;
  for (const auto& v : r.volumes()) {
    if (!v.has_data_path()) {
      continue;
    }
    const auto& d = v.data_path();
    std::string serves;
    if (d.pid() > 0) {
      serves = absl::StrCat(" session pid ", d.pid(), ", build ", d.build().substr(0, 12),
                            ", FUSE ", OrDash(d.fuse_mode()),
                            d.io_flusher() ? "" : ", not an I/O flusher (no CAP_SYS_RESOURCE)",
                            d.outdated() ? " (an earlier build: replaced in place)" : "");
    } else if (d.reservation_key() != 0 || d.unreserved()) {
      serves = " session";  // The kernel's: no process of ours.
    } else {
      continue;
    }
    absl::StrAppend(
        &paths, "  ", v.name(), ": ", d.transport(), serves,
        d.xfs_nouuid() ? ", XFS mounted with nouuid (another mounted XFS has its UUID)" : "",
        d.reservation_key() != 0
            ? absl::StrCat(", reserved (key ", iscsi::FormatKey(d.reservation_key()), ")")
            : "",
        d.unreserved() ? ", NOT reserved (the target has no persistent reservations)" : "", "\n");
  }
  if (!paths.empty()) {
    absl::StrAppend(&out, "\ndata paths:\n", paths);
  }
  // Sorted by file: the proto map has no order.
  std::map<std::string, std::string> errors(r.manifest_errors().begin(), r.manifest_errors().end());
  for (const auto& v : r.volumes()) {
    if (!v.manifest_error().empty()) {
      errors.emplace(v.manifest_file().empty() ? v.name() : v.manifest_file(), v.manifest_error());
    }
  }
  if (!errors.empty()) {
    absl::StrAppend(&out, "\nmanifest errors:\n");
    for (const auto& [file, error] : errors) {
      absl::StrAppend(&out, "  ", file, ": ", Truncate(error, 0), "\n");
    }
  }
  return out;
}

std::string FormatPlugins(const agent::v1::ListPluginsResponse& r, size_t max_width) {
  Table t({"NAME", "HEALTHY", "ENDPOINT", "VERSION", "NODE ID", "LAST ERROR"});
  for (const auto& p : r.plugins()) {
    t.AddRow({p.name(), YesNo(p.healthy()), OrDash(p.endpoint()),
              OrDash(p.vendor_version().empty() ? p.version() : p.vendor_version()),
              OrDash(p.node_id()), OrDash(p.last_error())});
  }
  std::string out = t.Render(max_width);
  if (r.plugins().empty()) {
    absl::StrAppend(&out, "(no plugins registered)\n");
  }
  if (!r.pending().empty()) {
    absl::StrAppend(&out, "\npending registration sockets:\n");
    for (const auto& a : r.pending()) {
      std::string line = absl::StrCat("  ", a.socket_path());
      if (!a.plugin_name().empty()) {
        absl::StrAppend(&line, " (", a.plugin_name(), ")");
      }
      absl::StrAppend(&line, ": ", a.failures(), a.failures() == 1 ? " failure" : " failures");
      if (!a.next_retry().empty()) {
        absl::StrAppend(&line, ", next retry ", a.next_retry());
      }
      absl::StrAppend(&line, ": ", OrDash(a.last_error()));
      absl::StrAppend(&out, Truncate(line, 0), "\n");
    }
  }
  return out;
}

google::protobuf::Value StringValue(const std::string& s) {
  google::protobuf::Value v;
  v.set_string_value(s);
  return v;
}

google::protobuf::Value NumberValue(double d) {
  google::protobuf::Value v;
  v.set_number_value(d);
  return v;
}

}  // namespace stagehand::ctl
