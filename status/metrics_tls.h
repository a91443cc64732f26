#pragma once

// TLS for the metrics endpoint, through civetweb's own TLS (OpenSSL): a server certificate and
// key, and optionally a CA whose client certificates alone may read /metrics. The probes
// (/healthz, /readyz) stay readable without a client certificate, so that the kubelet's HTTPS
// probes (which present none) keep working.

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand::status {

struct MetricsTls {
  std::string cert_file;       // PEM: the server's certificate (chain). Empty: plain HTTP.
  std::string key_file;        // PEM: its private key.
  std::string client_ca_file;  // PEM: the CA of the clients that may read /metrics; may be empty.

  bool enabled() const { return !cert_file.empty(); }
};

// InvalidArgument, naming the flag, unless the three make sense together: a certificate and a
// key (both or neither), a client CA only with them. Reads no file.
absl::Status ValidateMetricsTls(const MetricsTls& tls);

// What civetweb is started with to serve `address` ("host:port", as ListeningAddress gives
// it): one worker, and with TLS the port marked for TLS 1.2 and newer, the certificate and key
// in one PEM (civetweb reads them from one file) held in `pem`, a sealed memory file that must
// outlive the server (no copy of the key on disk), and the client CA with verification
// optional (a presented certificate must verify; whether one is needed is decided per path).
// InvalidArgument when a file cannot be read or holds no PEM block; then loads OpenSSL for
// civetweb (libssl_shim.cc says why and how): FailedPrecondition when it cannot.
absl::StatusOr<std::vector<std::string>> CivetOptions(const std::string& address,
                                                      const MetricsTls& tls, UniqueFd& pem);

}  // namespace stagehand::status
