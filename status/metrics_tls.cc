#include "status/metrics_tls.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "base/file_io.h"

namespace stagehand::status {
namespace {

// The PEM text of `path`, or InvalidArgument naming `flag`.
absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read '", path, "': ", text.status().message()));
  }
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' holds no PEM block"));
  }
  if (!text->ends_with('\n')) {
    text->push_back('\n');
  }
  return text;
}

// Loads the two libraries of libssl_shim.cc and libcrypto_shim.cc from <bin>/../lib/stagehand,
// once for the process (they stay loaded: civetweb calls into them until the process ends).
absl::Status LoadOpenSslForCivetweb() {
  static const absl::Status kLoaded = [] {
    std::string exe(PATH_MAX, '\0');
    const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size());
    if (n <= 0) {
      return absl::InternalError("cannot read /proc/self/exe");
    }
    exe.resize(static_cast<size_t>(n));
    const std::string dir = exe.substr(0, exe.rfind('/')) + "/../lib/stagehand/";
    for (const char* name : {"libstagehand-crypto.so", "libstagehand-ssl.so"}) {
      if (dlopen((dir + name).c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("TLS for the metrics endpoint needs ", dir, name,
                         " (installed with stagehand) and OpenSSL 3 (libssl3): ", dlerror()));
      }
    }
    return absl::OkStatus();
  }();
  return kLoaded;
}

}  // namespace

absl::Status ValidateMetricsTls(const MetricsTls& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--metrics-tls-cert and --metrics-tls-key go together: give both, or neither for plain "
        "HTTP");
  }
  if (!tls.client_ca_file.empty() && !tls.enabled()) {
    return absl::InvalidArgumentError(
        "--metrics-client-ca needs --metrics-tls-cert and --metrics-tls-key: client "
        "certificates are checked over TLS only");
  }
  return absl::OkStatus();
}

std::vector<std::string> TlsCivetOptions(const std::string& address, const MetricsTls& tls,
                                         int pem) {
  // One worker: a scrape and the probes take milliseconds, and a request that hangs on a stuck
  // reconciler lock would hang every other one too (each reads the reconciler).
  std::vector<std::string> options = {"num_threads", "1", "request_timeout_ms", "10000"};
  if (!tls.enabled()) {
    options.insert(options.end(), {"listening_ports", address});
    return options;
  }
  options.insert(options.end(), {"listening_ports", address + "s", "ssl_certificate",
                                 absl::StrCat("/proc/self/fd/", pem),
                                 // civetweb's 4: TLS 1.2 and newer.
                                 "ssl_protocol_version", "4"});
  if (!tls.client_ca_file.empty()) {
    // Without "no", civetweb also trusts every CA of the system's store for client
    // certificates: anyone with a publicly issued client certificate would read /metrics.
    options.insert(options.end(), {"ssl_ca_file", tls.client_ca_file, "ssl_verify_peer", "optional",
                                   "ssl_default_verify_paths", "no"});
  }
  return options;
}

absl::StatusOr<CivetConfig> CivetOptions(const std::string& address, const MetricsTls& tls) {
  CivetConfig config;
  if (tls.enabled()) {
    SH_ASSIGN_OR_RETURN(std::string key, ReadPem("--metrics-tls-key", tls.key_file));
    SH_ASSIGN_OR_RETURN(std::string cert, ReadPem("--metrics-tls-cert", tls.cert_file));
    if (!tls.client_ca_file.empty()) {
      SH_RETURN_IF_ERROR(ReadPem("--metrics-client-ca", tls.client_ca_file).status());
    }
    SH_RETURN_IF_ERROR(LoadOpenSslForCivetweb());
    SH_ASSIGN_OR_RETURN(config.pem, SealedMemoryFile("stagehand-metrics-tls", key + cert));
  }
  config.options = TlsCivetOptions(address, tls, config.pem.Get());
  return config;
}

}  // namespace stagehand::status
