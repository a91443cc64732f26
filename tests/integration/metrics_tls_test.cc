// The metrics endpoint over TLS with a client CA (--metrics-tls-cert, --metrics-tls-key,
// --metrics-client-ca): real certificates made with openssl, a real agent, curl and a real
// Prometheus as the clients.

#include <stdlib.h>

#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "proto/agent.grpc.pb.h"
#include "tests/integration/node_test_base.h"
#include "tests/integration/prometheus_server.h"

namespace stagehand::testing {
namespace {

using ::testing::HasSubstr;

// Runs `argv`, failing the test when it cannot start or exits non-zero.
void Run(const std::vector<std::string>& argv) {
  auto r = RunProcess(argv, RunOptions{std::chrono::seconds(30)});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << ArgvToString(argv) << ":\n" << r->output;
}

// An EC key and certificate `name`.crt/.key in `dir`, signed by `ca` (self-signed when empty),
// for 127.0.0.1.
void MakeCertificate(const std::string& dir, const std::string& name, const std::string& ca) {
  std::vector<std::string> argv = {"openssl",
                                   "req",
                                   "-x509",
                                   "-newkey",
                                   "ec",
                                   "-pkeyopt",
                                   "ec_paramgen_curve:prime256v1",
                                   "-nodes",
                                   "-days",
                                   "2",
                                   "-subj",
                                   "/CN=" + name,
                                   "-addext",
                                   "subjectAltName=IP:127.0.0.1",
                                   "-keyout",
                                   dir + "/" + name + ".key",
                                   "-out",
                                   dir + "/" + name + ".crt"};
  if (!ca.empty()) {
    argv.insert(argv.end(), {"-CA", dir + "/" + ca + ".crt", "-CAkey", dir + "/" + ca + ".key"});
  }
  Run(argv);
}

struct Answer {
  int curl_exit = -1;  // 0 when an HTTP answer came.
  std::string output;  // The body, then the HTTP code.
};

// GET https://127.0.0.1:`port``path` trusting `ca`, with the client certificate `client`
// (none when empty).
Answer Get(const std::string& dir, int port, const std::string& path, const std::string& client,
           const std::string& scheme = "https") {
  std::vector<std::string> argv = {"curl",     "-sS",           "--max-time", "10",
                                   "--cacert", dir + "/ca.crt", "-w",         " %{http_code}"};
  if (!client.empty()) {
    argv.insert(argv.end(),
                {"--cert", dir + "/" + client + ".crt", "--key", dir + "/" + client + ".key"});
  }
  argv.push_back(scheme + "://127.0.0.1:" + std::to_string(port) + path);
  auto r = RunProcess(argv, RunOptions{std::chrono::seconds(20)});
  return r.ok() ? Answer{r->exit_code, r->output} : Answer{-1, std::string(r.status().message())};
}

class MetricsTlsTest : public NodeIntegrationTest {
 protected:
  static void SetUpTestSuite() {
    NodeIntegrationTest::SetUpTestSuite();
    char dir[] = "/tmp/shtls.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    certs_ = dir;
    MakeCertificate(certs_, "ca", "");
    MakeCertificate(certs_, "server", "ca");
    MakeCertificate(certs_, "prometheus", "ca");
    MakeCertificate(certs_, "other-ca", "");
    MakeCertificate(certs_, "stranger", "other-ca");
  }

  static void TearDownTestSuite() {
    if (!certs_.empty()) {
      (void)RunProcess({"rm", "-rf", certs_});
    }
    NodeIntegrationTest::TearDownTestSuite();
  }

  std::vector<std::string> DaemonFlags() const override {
    return {"--metrics-tls-cert=" + certs_ + "/server.crt",
            "--metrics-tls-key=" + certs_ + "/server.key",
            "--metrics-client-ca=" + certs_ + "/ca.crt"};
  }

  int MetricsPort() const {
    auto agent = agent::v1::Agent::NewStub(grpc::CreateChannel(
        "unix:" + daemon_->runtime_dir() + "/agent.sock", grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agent::v1::AgentStatus status;
    EXPECT_TRUE(agent->GetStatus(&context, {}, &status).ok());
    return status.metrics_port();
  }

  static std::string certs_;
};

std::string MetricsTlsTest::certs_;

// Only a client with a certificate of the client CA reads /metrics; the probes answer anyone
// over TLS (as the kubelet's HTTPS probes, which present no certificate, ask); nothing answers
// plain HTTP; a certificate of another CA does not get through the handshake.
TEST_F(MetricsTlsTest, OnlyClientsOfTheClientCaReadTheMetrics) {
  const int port = MetricsPort();
  ASSERT_GT(port, 0);

  const Answer healthz = Get(certs_, port, "/healthz", "");
  const Answer readyz = Get(certs_, port, "/readyz", "");
  const Answer anonymous = Get(certs_, port, "/metrics", "");
  const Answer client = Get(certs_, port, "/metrics", "prometheus");
  const Answer stranger = Get(certs_, port, "/metrics", "stranger");
  const Answer plain = Get(certs_, port, "/healthz", "", "http");

  EXPECT_EQ(healthz.curl_exit, 0) << healthz.output;
  EXPECT_THAT(healthz.output, ::testing::EndsWith(" 200"));
  EXPECT_EQ(readyz.curl_exit, 0) << readyz.output;
  EXPECT_THAT(readyz.output, ::testing::MatchesRegex("(.|\n)* (200|503)"));
  EXPECT_THAT(anonymous.output, ::testing::EndsWith(" 403"));
  EXPECT_THAT(anonymous.output, HasSubstr("--metrics-client-ca"));
  EXPECT_THAT(anonymous.output, ::testing::Not(HasSubstr("stagehand_")));
  EXPECT_THAT(client.output, ::testing::EndsWith(" 200"));
  EXPECT_THAT(client.output, HasSubstr("stagehand_agent_ready "));
  EXPECT_NE(stranger.curl_exit, 0) << stranger.output;
  EXPECT_THAT(stranger.output, ::testing::Not(HasSubstr("stagehand_")));
  EXPECT_NE(plain.curl_exit, 0) << plain.output;
  EXPECT_THAT(plain.output, ::testing::Not(HasSubstr("ok")));

  // A real Prometheus with the client certificate scrapes it.
  PrometheusServer prometheus(root_, port,
                              PrometheusServer::Tls{certs_ + "/ca.crt", certs_ + "/prometheus.crt",
                                                    certs_ + "/prometheus.key"});
  EXPECT_THAT(prometheus.QueryUntilPresent("stagehand_agent_ready"), HasSubstr("=>"));
}

}  // namespace
}  // namespace stagehand::testing
