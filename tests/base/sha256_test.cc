#include "base/sha256.h"

#include <string>

#include <gtest/gtest.h>

namespace stagehand {
namespace {

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, PiecesHashLikeTheWhole) {
  EXPECT_EQ(Sha256Hex(std::string(1'000'000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  std::string data;
  for (int i = 0; i < 300; ++i) {
    data.push_back(static_cast<char>(i * 7));
  }
  // Every piece size around the block (64) and length-field (56) boundaries.
  for (size_t piece : {1, 3, 55, 56, 57, 63, 64, 65, 127, 300}) {
    for (size_t total : {0, 55, 56, 63, 64, 119, 120, 300}) {
      const std::string whole = data.substr(0, total);
      Sha256 hash;
      for (size_t off = 0; off < whole.size(); off += piece) {
        hash.Update(std::string_view(whole).substr(off, piece));
      }
      EXPECT_EQ(hash.HexDigest(), Sha256Hex(whole)) << "piece " << piece << " total " << total;
    }
  }
}

}  // namespace
}  // namespace stagehand
