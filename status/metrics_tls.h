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

// What civetweb is started with: its options, and with TLS the memory file they name.
struct CivetConfig {
  std::vector<std::string> options;
  // The certificate and key in one PEM (civetweb reads them from one file): a sealed memory
  // file, named in `options` as /proc/self/fd/N, that must stay open while the server runs (no
  // copy of the key on disk). Invalid without TLS.
  UniqueFd pem;
};

// How civetweb serves `address` ("host:port", as ListeningAddress gives it): one worker, a
// request timeout of 10 s (a client that stalls holds the only worker no longer), and with TLS
// the port marked for TLS 1.2 and newer, and with a client CA that CA alone (not the system's
// trust store) for client certificates, verification optional (a presented certificate must
// verify; whether one is needed is decided per path).
// InvalidArgument when a file cannot be read or holds no PEM block; then loads OpenSSL for
// civetweb (libssl_shim.cc says why and how): FailedPrecondition when it cannot.
absl::StatusOr<CivetConfig> CivetOptions(const std::string& address, const MetricsTls& tls);

// The options of CivetOptions for `tls` (enabled) with the certificate and key in descriptor
// `pem`: no file read, nothing loaded. Exposed for tests.
std::vector<std::string> TlsCivetOptions(const std::string& address, const MetricsTls& tls,
                                         int pem);

}  // namespace stagehand::status
