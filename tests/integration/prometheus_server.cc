#include "tests/integration/prometheus_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "base/subprocess.h"
#include "base/unique_fd.h"

namespace stagehand::testing {
namespace {

int FreePort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd.Get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return 0;
  }
  return ntohs(address.sin_port);
}

}  // namespace

PrometheusServer::PrometheusServer(const std::string& dir, int target_port,
                                   const std::optional<Tls>& tls)
    : port_(FreePort()) {
  const std::string config = dir + "/prometheus.yml";
  std::ofstream out(config);
  out << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: stagehand\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << target_port << "']\n";
  if (tls) {
    out << "    scheme: https\n    tls_config:\n      ca_file: " << tls->ca_file << "\n";
    if (!tls->cert_file.empty()) {
      out << "      cert_file: " << tls->cert_file << "\n      key_file: " << tls->key_file << "\n";
    }
  }
  out.close();
  pid_ = fork();
  if (pid_ == 0) {
    const std::string log = dir + "/prometheus.log";
    (void)!freopen(log.c_str(), "a", stderr);
    execlp("prometheus", "prometheus", ("--config.file=" + config).c_str(),
           ("--storage.tsdb.path=" + dir + "/tsdb").c_str(),
           ("--web.listen-address=127.0.0.1:" + std::to_string(port_)).c_str(), nullptr);
    _exit(127);
  }
}

PrometheusServer::~PrometheusServer() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<std::string> PrometheusServer::Query(const std::string& expr) const {
  // "--": an expression may start with '-'.
  auto r = RunProcess(
      {"promtool", "query", "instant", "http://127.0.0.1:" + std::to_string(port_), "--", expr},
      RunOptions{std::chrono::seconds(10)});
  if (!r.ok()) {
    return r.status();
  }
  if (r->exit_code != 0) {
    return absl::InvalidArgumentError(absl::StrCat("promtool: ", r->output));
  }
  return r->output;
}

std::string PrometheusServer::QueryUntilPresent(const std::string& expr) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string out;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = Query(expr);
    out = r.ok() ? *r : std::string(r.status().message());
    if (r.ok() && absl::StrContains(out, "=>")) {
      return out;
    }
  }
  return out;
}

}  // namespace stagehand::testing
