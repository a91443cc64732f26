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
  UniqueFd pem;
  auto options = CivetOptions("127.0.0.1:29780", {}, pem);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(*options,
            (std::vector<std::string>{"num_threads", "1", "listening_ports", "127.0.0.1:29780"}));
  EXPECT_FALSE(pem.Valid());
}

TEST(MetricsTlsTest, AFileThatCannotBeReadOrHoldsNoPemIsNamedWithItsFlag) {
  char dir[] = "/tmp/shtlsu.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string text = std::string(dir) + "/not-pem";
  ASSERT_TRUE(WriteFileAtomically(text, "hello\n", 0600).ok());
  UniqueFd pem;

  auto missing = CivetOptions("127.0.0.1:0", {text, std::string(dir) + "/none", ""}, pem);
  auto not_pem = CivetOptions("127.0.0.1:0", {text, text, ""}, pem);

  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("--metrics-tls-key"));
  EXPECT_THAT(missing.status().message(), HasSubstr("/none"));
  EXPECT_EQ(not_pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_pem.status().message(), HasSubstr("holds no PEM block"));
  EXPECT_FALSE(pem.Valid());
  unlink(text.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace stagehand::status
