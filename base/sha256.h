#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace stagehand {

// SHA-256 over data given in pieces (a file read in chunks), without holding it all.
class Sha256 {
 public:
  void Update(std::string_view data);
  // 64 lower-case hex digits. Ends the hash: call once.
  std::string HexDigest();

 private:
  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<uint8_t, 64> block_{};
  size_t block_used_ = 0;
  uint64_t length_ = 0;  // Bytes.
};

// SHA-256 of `data` as 64 lower-case hex digits (FIPS 180-4). Used to name per-volume
// directories the way the kubelet does (sha256 of the volume handle).
std::string Sha256Hex(std::string_view data);

}  // namespace stagehand
