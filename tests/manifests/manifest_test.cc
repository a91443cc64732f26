#include "manifests/manifest.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::manifests {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using reconciler::AccessMode;
using reconciler::PublishTarget;
using reconciler::VolumeSpec;

constexpr char kFull[] = R"(name: pg-data
driver: iscsi.stagehand.dev
volumeHandle: pg-data
capability:
  mount:
    fsType: ext4
    mountFlags: [noatime, nodev]
  accessMode: single-node-writer
volumeContext: {portal: "10.0.0.5:3260", lun: 1}
publishContext:
  device: sdb
secretsFile: /etc/stagehand/secrets/pg.yaml
publish:
  - targetPath: /srv/pg
    readOnly: false
  - targetPath: /srv/pg-ro
    readOnly: true
)";

constexpr char kMinimal[] = R"(name: v1
driver: iscsi.stagehand.dev
volumeHandle: h1
capability:
  block: {}
)";

// Expects InvalidArgument with "m.yaml:<line>: " and `what` in the message.
void ExpectError(const std::string& yaml, int line, const std::string& what) {
  EXPECT_THAT(ParseManifest(yaml, "m.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("m.yaml:" + std::to_string(line) + ": "), HasSubstr(what))))
      << yaml;
}

TEST(ParseManifestTest, FullExample) {
  auto spec = ParseManifest(kFull, "pg.yaml");

  ASSERT_THAT(spec, IsOk());
  VolumeSpec want;
  want.name = "pg-data";
  want.driver = "iscsi.stagehand.dev";
  want.volume_handle = "pg-data";
  want.capability.block = false;
  want.capability.fs_type = "ext4";
  want.capability.mount_flags = {"noatime", "nodev"};
  want.capability.access_mode = AccessMode::kSingleNodeWriter;
  want.volume_context = {{"portal", "10.0.0.5:3260"}, {"lun", "1"}};
  want.publish_context = {{"device", "sdb"}};
  want.secrets_file = "/etc/stagehand/secrets/pg.yaml";
  want.publish = {PublishTarget{"/srv/pg", false}, PublishTarget{"/srv/pg-ro", true}};
  EXPECT_EQ(*spec, want);
}

TEST(ParseManifestTest, MinimalBlockVolumeGetsDefaults) {
  auto spec = ParseManifest(kMinimal, "m.yaml");

  ASSERT_THAT(spec, IsOk());
  EXPECT_TRUE(spec->capability.block);
  EXPECT_EQ(spec->capability.access_mode, AccessMode::kSingleNodeWriter);
  EXPECT_TRUE(spec->publish.empty());
  EXPECT_TRUE(spec->secrets_file.empty());
}

TEST(ParseManifestTest, BareMountAndBlockKeysAreAccepted) {
  auto mount = ParseManifest("name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  mount:\n", "m");
  auto block = ParseManifest("name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  block:\n", "m");

  ASSERT_THAT(mount, IsOk());
  ASSERT_THAT(block, IsOk());
  EXPECT_FALSE(mount->capability.block);
  EXPECT_TRUE(block->capability.block);
}

TEST(ParseManifestTest, EveryAccessModeParses) {
  const std::pair<const char*, AccessMode> modes[] = {
      {"single-node-writer", AccessMode::kSingleNodeWriter},
      {"single-node-reader-only", AccessMode::kSingleNodeReaderOnly},
      {"single-node-single-writer", AccessMode::kSingleNodeSingleWriter},
      {"single-node-multi-writer", AccessMode::kSingleNodeMultiWriter},
      {"multi-node-reader-only", AccessMode::kMultiNodeReaderOnly},
      {"multi-node-single-writer", AccessMode::kMultiNodeSingleWriter},
      {"multi-node-multi-writer", AccessMode::kMultiNodeMultiWriter},
  };
  for (const auto& [text, mode] : modes) {
    auto spec = ParseManifest(std::string(kMinimal) + "  accessMode: " + text + "\n", "m.yaml");
    ASSERT_THAT(spec, IsOk()) << text;
    EXPECT_EQ(spec->capability.access_mode, mode) << text;
  }
}

TEST(ParseManifestTest, ReadOnlyModeMakesPublishReadOnlyByDefault) {
  auto spec = ParseManifest(std::string(kMinimal) +
                                "  accessMode: multi-node-reader-only\n"
                                "publish:\n  - targetPath: /srv/a\n",
                            "m.yaml");

  ASSERT_THAT(spec, IsOk());
  ASSERT_EQ(spec->publish.size(), 1u);
  EXPECT_TRUE(spec->publish[0].read_only);
}

TEST(ParseManifestTest, EmptyFile) {
  ExpectError("", 1, "file is empty");
  ExpectError("# just a comment\n", 1, "file is empty");
  ExpectError("---\n", 1, "file is empty");
}

TEST(ParseManifestTest, SyntaxErrorHasLine) {
  ExpectError("name: a\ndriver: [d\nvolumeHandle: h\n", 3, "invalid YAML: end of sequence");
  ExpectError("name: a\n  bad: indent\n", 2, "invalid YAML: illegal map value");
}

TEST(ParseManifestTest, SeveralDocuments) {
  ExpectError(std::string(kMinimal) + "---\n" + kMinimal, 7, "more than one YAML document");
}

TEST(ParseManifestTest, TopLevelMustBeAMap) {
  ExpectError("- a\n- b\n", 1, "must be a map");
  ExpectError("just text\n", 1, "must be a map");
}

TEST(ParseManifestTest, UnknownKeysAreNamedWithTheAllowedOnes) {
  ExpectError(std::string(kMinimal) + "sizeBytes: 10\n", 6,
              "unknown key 'sizeBytes' at the top level; allowed keys: 'name', 'driver'");
  ExpectError("name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  block: {}\n  readOnly: true\n",
              6, "unknown key 'readOnly' in 'capability'; allowed keys: 'mount', 'block'");
  ExpectError("name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  mount:\n    fstype: ext4\n", 6,
              "unknown key 'fstype' in 'capability.mount'; allowed keys: 'fsType', 'mountFlags'");
  ExpectError("name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  block: {size: 1}\n", 5,
              "unknown key 'size' in 'capability.block'");
  ExpectError(std::string(kMinimal) + "publish:\n  - targetPath: /a\n    readonly: true\n", 8,
              "unknown key 'readonly' in a 'publish' entry; allowed keys: 'targetPath', "
              "'readOnly'");
}

TEST(ParseManifestTest, DuplicateKey) {
  ExpectError(std::string(kMinimal) + "name: b\n", 6, "duplicate key 'name'");
}

TEST(ParseManifestTest, RequiredKeys) {
  ExpectError("driver: d\nvolumeHandle: h\ncapability: {block: {}}\n", 1,
              "missing required key 'name'");
  ExpectError("name: a\nvolumeHandle: h\ncapability: {block: {}}\n", 1,
              "missing required key 'driver'");
  ExpectError("name: a\ndriver: d\ncapability: {block: {}}\n", 1,
              "missing required key 'volumeHandle'");
  ExpectError("name: a\ndriver: d\nvolumeHandle: h\n", 1, "missing required key 'capability'");
  ExpectError("name: a\ndriver: d\nvolumeHandle: ''\ncapability: {block: {}}\n", 3,
              "'volumeHandle' must not be empty");
  ExpectError("name: a\ndriver: d\nvolumeHandle:\ncapability: {block: {}}\n", 1,
              "missing required key 'volumeHandle'");
}

TEST(ParseManifestTest, NameRule) {
  ExpectError("name: PG\ndriver: d\nvolumeHandle: h\ncapability: {block: {}}\n", 1,
              "name 'PG' is not valid");
  ExpectError("name: -pg\ndriver: d\nvolumeHandle: h\ncapability: {block: {}}\n", 1,
              "is not valid");
  ExpectError("name: " + std::string(64, 'a') + "\ndriver: d\nvolumeHandle: h\n", 1,
              "is not valid");
  ExpectError("name: [a]\ndriver: d\nvolumeHandle: h\n", 1, "'name' must be a string");
  EXPECT_THAT(ParseManifest("name: " + std::string(63, 'a') +
                                "\ndriver: d\nvolumeHandle: h\ncapability: {block: {}}\n",
                            "m.yaml"),
              IsOk());
  EXPECT_THAT(ParseManifest("name: 0a.b_c-d\ndriver: d\nvolumeHandle: h\ncapability: {block: {}}\n",
                            "m.yaml"),
              IsOk());
}

TEST(ParseManifestTest, DriverRule) {
  ExpectError("name: a\ndriver: -iscsi\nvolumeHandle: h\ncapability: {block: {}}\n", 2,
              "driver '-iscsi' is not a CSI driver name");
  ExpectError("name: a\ndriver: iscsi.\nvolumeHandle: h\ncapability: {block: {}}\n", 2,
              "is not a CSI driver name");
  ExpectError("name: a\ndriver: a_b\nvolumeHandle: h\ncapability: {block: {}}\n", 2,
              "is not a CSI driver name");
  ExpectError("name: a\ndriver: " + std::string(64, 'd') + "\nvolumeHandle: h\n", 2,
              "is not a CSI driver name");
  EXPECT_THAT(ParseManifest("name: a\ndriver: Csi.Example-1.com\nvolumeHandle: h\n"
                            "capability: {block: {}}\n",
                            "m.yaml"),
              IsOk());
}

TEST(ParseManifestTest, CapabilityNeedsExactlyOneKind) {
  ExpectError(
      "name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  accessMode: single-node-writer\n", 4,
      "exactly one of 'mount'");
  ExpectError("name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  mount: {}\n  block: {}\n", 4,
              "exactly one of 'mount'");
  ExpectError("name: a\ndriver: d\nvolumeHandle: h\ncapability: block\n", 4,
              "'capability' must be a map");
}

TEST(ParseManifestTest, BadAccessMode) {
  ExpectError(std::string(kMinimal) + "  accessMode: ReadWriteOnce\n", 6,
              "unknown accessMode 'ReadWriteOnce'; use one of: single-node-writer, "
              "single-node-reader-only");
}

TEST(ParseManifestTest, MountFlagsMustBeStrings) {
  ExpectError("name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  mount:\n    mountFlags: ro\n", 6,
              "'mountFlags' must be a list of strings");
  ExpectError(
      "name: a\ndriver: d\nvolumeHandle: h\ncapability:\n  mount:\n    mountFlags:\n"
      "      - ro\n      - {a: b}\n",
      8, "'mountFlags' must hold non-empty strings only");
}

TEST(ParseManifestTest, ContextsAreFlatStringMaps) {
  ExpectError(std::string(kMinimal) + "volumeContext: [a]\n", 6,
              "expected a map of key: value in 'volumeContext'");
  ExpectError(std::string(kMinimal) + "publishContext:\n  a: b\n  c: {d: e}\n", 8,
              "the value of 'c' in 'publishContext' must be a string");
}

TEST(ParseManifestTest, SecretsFileMustBeAbsolute) {
  ExpectError(std::string(kMinimal) + "secretsFile: secrets/pg.yaml\n", 6,
              "secretsFile 'secrets/pg.yaml' must be an absolute, normalised path");
  ExpectError(std::string(kMinimal) + "secretsFile: /etc/../pg.yaml\n", 6,
              "must be an absolute, normalised path");
}

TEST(ParseManifestTest, PublishEntries) {
  ExpectError(std::string(kMinimal) + "publish: /srv/a\n", 6, "'publish' must be a list");
  ExpectError(std::string(kMinimal) + "publish:\n  - /srv/a\n", 7,
              "each 'publish' entry must be a map");
  ExpectError(std::string(kMinimal) + "publish:\n  - readOnly: true\n", 7,
              "missing required key 'targetPath' in a 'publish' entry");
  ExpectError(std::string(kMinimal) + "publish:\n  - targetPath: srv/a\n", 7,
              "targetPath 'srv/a' must be an absolute, normalised path");
  ExpectError(std::string(kMinimal) + "publish:\n  - targetPath: /srv/a/\n", 7,
              "must be an absolute, normalised path");
  ExpectError(std::string(kMinimal) + "publish:\n  - targetPath: /srv/a\n    readOnly: maybe\n", 8,
              "'readOnly' must be true or false");
}

TEST(ParseManifestTest, DuplicateTargetPath) {
  ExpectError(std::string(kMinimal) +
                  "publish:\n  - targetPath: /srv/a\n  - targetPath: /srv/b\n"
                  "  - targetPath: /srv/a\n    readOnly: true\n",
              9, "targetPath '/srv/a' is already published on line 7");
}

TEST(ParseManifestTest, ReadOnlyModeWithWritablePublish) {
  ExpectError(std::string(kMinimal) +
                  "  accessMode: single-node-reader-only\n"
                  "publish:\n  - targetPath: /srv/a\n    readOnly: false\n",
              9, "readOnly: false contradicts the read-only accessMode");
}

TEST(CheckTargetPathsTest, TargetsMustBeOutsideTheStateDir) {
  VolumeSpec spec;
  spec.name = "v";
  spec.publish = {{"/srv/a", false}, {"/var/lib/stagehand-other", false}};
  EXPECT_THAT(CheckTargetPaths(spec, "/var/lib/stagehand"), IsOk());

  spec.publish.push_back({"/var/lib/stagehand", false});
  EXPECT_THAT(CheckTargetPaths(spec, "/var/lib/stagehand"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("targetPath '/var/lib/stagehand' is inside")));

  spec.publish.back().target_path = "/var/lib/stagehand/mnt/v";
  EXPECT_THAT(
      CheckTargetPaths(spec, "/var/lib/stagehand"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'/var/lib/stagehand/mnt/v'")));
}

class SecretsFileTest : public ::testing::Test {
 protected:
  stagehand::testing::TempDir temp_;
  const std::string dir_ = temp_.path();

  // Tests run unprivileged too: the required owner is whoever runs them.
  static absl::StatusOr<std::map<std::string, std::string>> Load(const std::string& path) {
    return LoadSecretsFile(path, geteuid());
  }
};

TEST_F(SecretsFileTest, ReadsAFlatMap) {
  const std::string path = dir_ + "/pg.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "user: pg\npassword: \"s3cr3t:x\"\nport: 3260\n", 0600),
              IsOk());

  auto secrets = Load(path);

  ASSERT_THAT(secrets, IsOk());
  EXPECT_EQ(*secrets, (std::map<std::string, std::string>{
                          {"user", "pg"}, {"password", "s3cr3t:x"}, {"port", "3260"}}));
}

TEST_F(SecretsFileTest, GroupReadableIsRejected) {
  const std::string path = dir_ + "/pg.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "user: pg\n", 0640), IsOk());

  EXPECT_THAT(Load(path), StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("mode 0640"), HasSubstr("chmod 0600"))));
}

TEST_F(SecretsFileTest, Mode0400IsFine) {
  const std::string path = dir_ + "/pg.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "user: pg\n", 0400), IsOk());

  EXPECT_THAT(Load(path), IsOk());
}

TEST_F(SecretsFileTest, WorldReadableIsRejectedWithoutTheValues) {
  const std::string path = dir_ + "/pg.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "password: hunter2\n", 0644), IsOk());

  EXPECT_THAT(Load(path), StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("mode 0644"), HasSubstr("chmod 0600 '" + path),
                                         Not(HasSubstr("hunter2")))));
}

TEST_F(SecretsFileTest, GroupWritableIsRejected) {
  const std::string path = dir_ + "/pg.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "password: hunter2\n", 0620), IsOk());

  EXPECT_THAT(Load(path), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("chmod 0600")));
}

TEST_F(SecretsFileTest, WrongOwnerIsRejected) {
  const std::string path = dir_ + "/pg.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "password: hunter2\n", 0600), IsOk());

  EXPECT_THAT(LoadSecretsFile(path, geteuid() + 1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("chown")));
  if (geteuid() != 0) {
    EXPECT_THAT(LoadSecretsFile(path),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("chown root")));
  }
}

TEST_F(SecretsFileTest, MissingIsNotFound) {
  EXPECT_THAT(Load(dir_ + "/missing.yaml"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SecretsFileTest, SymlinkIsRefused) {
  const std::string path = dir_ + "/pg.yaml";
  const std::string link = dir_ + "/link.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "password: hunter2\n", 0600), IsOk());
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);

  EXPECT_THAT(Load(link),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("symbolic link")));
}

TEST_F(SecretsFileTest, DirectoryIsRefused) {
  EXPECT_THAT(Load(dir_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is not a regular file")));
}

TEST_F(SecretsFileTest, BadContentNeverQuotesValues) {
  const std::string path = dir_ + "/pg.yaml";
  ASSERT_THAT(WriteFileAtomically(path, "user: pg\npassword: [hunter2]\n", 0600), IsOk());
  EXPECT_THAT(Load(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(":2: the value of 'password'"), Not(HasSubstr("hunter2")))));

  ASSERT_THAT(WriteFileAtomically(path, "password: \"hun\\qter2\"\n", 0600), IsOk());
  EXPECT_THAT(Load(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                   AllOf(HasSubstr(":1: invalid YAML (details withheld"),
                                         Not(HasSubstr("escape")))));

  ASSERT_THAT(WriteFileAtomically(path, "- hunter2\n", 0600), IsOk());
  EXPECT_THAT(Load(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                   AllOf(HasSubstr("flat map"), Not(HasSubstr("hunter2")))));

  ASSERT_THAT(WriteFileAtomically(path, "", 0600), IsOk());
  EXPECT_THAT(Load(path), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("file is empty")));
}

TEST(LoadManifestFileTest, MissingIsNotFoundAndTooLargeIsRejected) {
  stagehand::testing::TempDir temp;
  const std::string& dir = temp.path();
  EXPECT_THAT(LoadManifestFile(dir + "/missing.yaml"), StatusIs(absl::StatusCode::kNotFound));

  const std::string big = dir + "/big.yaml";
  ASSERT_THAT(
      WriteFileAtomically(
          big, std::string(kMinimal) + "#" + std::string(kMaxManifestBytes, 'x') + "\n", 0644),
      IsOk());
  EXPECT_THAT(LoadManifestFile(big),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("larger than 1 MiB")));

  const std::string good = dir + "/good.yaml";
  ASSERT_THAT(WriteFileAtomically(good, kMinimal, 0644), IsOk());
  EXPECT_THAT(LoadManifestFile(good), IsOk());
}

}  // namespace
}  // namespace stagehand::manifests
