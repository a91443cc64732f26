#pragma once

// A real Prometheus server (Debian's `prometheus`) scraping one agent every second, for tests
// of what an operator's Prometheus sees; promtool queries it.

#include <sys/types.h>

#include <optional>
#include <string>

#include "base/status.h"

namespace stagehand::testing {

class PrometheusServer {
 public:
  // Scraping over HTTPS, with a client certificate where `cert_file` is set.
  struct Tls {
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
  };

  // Scrapes 127.0.0.1:`target_port` as job "stagehand" (over HTTPS with `tls`); its files go
  // to `dir`. Killed when destroyed.
  PrometheusServer(const std::string& dir, int target_port, const std::optional<Tls>& tls = {});
  ~PrometheusServer();
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  // `promtool query instant` until the result has a sample, or 60 s; returns promtool's output.
  std::string QueryUntilPresent(const std::string& expr) const;

  // One `promtool query instant`: its output, or an error with promtool's message (an
  // expression Prometheus cannot parse, a server that does not answer).
  absl::StatusOr<std::string> Query(const std::string& expr) const;

 private:
  int port_;
  pid_t pid_ = -1;
};

}  // namespace stagehand::testing
