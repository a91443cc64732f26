#include "status/metrics_tls.h"

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"

namespace stagehand::status {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTlsTest, CertificateAndKeyGoTogetherAndTheClientCaNeedsThem) {
  EXPECT_TRUE(ValidateMetricsTls({}).ok());
  EXPECT_TRUE(ValidateMetricsTls({"c.pem", "k.pem", ""}).ok());
  EXPECT_TRUE(ValidateMetricsTls({"c.pem", "k.pem", "ca.pem"}).ok());

  const absl::Status no_key = ValidateMetricsTls({"c.pem", "", ""});
  const absl::Status no_cert = ValidateMetricsTls({"", "k.pem", ""});
  const absl::Status ca_only = ValidateMetricsTls({"", "", "ca.pem"});

  EXPECT_EQ(no_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_key.message(), HasSubstr("--metrics-tls-key"));
  EXPECT_EQ(no_cert.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ca_only.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ca_only.message(), HasSubstr("--metrics-client-ca"));
}

TEST(MetricsTlsTest, PlainHttpIsOneWorkerOnTheAddress) {
  auto config = CivetOptions("127.0.0.1:29780", {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->options,
            (std::vector<std::string>{"num_threads", "1", "request_timeout_ms", "10000",
                                      "listening_ports", "127.0.0.1:29780"}));
  EXPECT_FALSE(config->pem.Valid());
}

// The client CA alone signs the clients: civetweb must not add the system's trust store.
TEST(MetricsTlsTest, TheClientCaAloneIsTrustedForClients) {
  const std::vector<std::string> tls =
      TlsCivetOptions("127.0.0.1:29780", {"c.pem", "k.pem", ""}, 7);
  const std::vector<std::string> mutual =
      TlsCivetOptions("127.0.0.1:29780", {"c.pem", "k.pem", "/etc/ca.pem"}, 7);

  EXPECT_EQ(tls, (std::vector<std::string>{"num_threads", "1", "request_timeout_ms", "10000",
                                           "listening_ports", "127.0.0.1:29780s", "ssl_certificate",
                                           "/proc/self/fd/7", "ssl_protocol_version", "4"}));
  std::vector<std::string> expected = tls;
  expected.insert(expected.end(), {"ssl_ca_file", "/etc/ca.pem", "ssl_verify_peer", "optional",
                                   "ssl_default_verify_paths", "no"});
  EXPECT_EQ(mutual, expected);
}

TEST(MetricsTlsTest, AFileThatCannotBeReadOrHoldsNoPemIsNamedWithItsFlag) {
  char dir[] = "/tmp/shtlsu.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string text = std::string(dir) + "/not-pem";
  ASSERT_TRUE(WriteFileAtomically(text, "hello\n", 0600).ok());
  auto missing = CivetOptions("127.0.0.1:0", {text, std::string(dir) + "/none", ""});
  auto not_pem = CivetOptions("127.0.0.1:0", {text, text, ""});

  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("--metrics-tls-key"));
  EXPECT_THAT(missing.status().message(), HasSubstr("/none"));
  EXPECT_EQ(not_pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_pem.status().message(), HasSubstr("holds no PEM block"));
  unlink(text.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace stagehand::status
