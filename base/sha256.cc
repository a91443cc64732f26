#include "base/sha256.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace stagehand {
namespace {

constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr uint32_t Rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

void Compress(std::array<uint32_t, 8>& h, const uint8_t* block) {
  std::array<uint32_t, 64> w{};
  for (size_t i = 0; i < 16; ++i) {
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) |
           (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  auto v = h;
  for (int i = 0; i < 64; ++i) {
    const uint32_t s1 = Rotr(v[4], 6) ^ Rotr(v[4], 11) ^ Rotr(v[4], 25);
    const uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
    const uint32_t t1 = v[7] + s1 + ch + kRound[i] + w[i];
    const uint32_t s0 = Rotr(v[0], 2) ^ Rotr(v[0], 13) ^ Rotr(v[0], 22);
    const uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
    const uint32_t t2 = s0 + maj;
    v[7] = v[6];
    v[6] = v[5];
    v[5] = v[4];
    v[4] = v[3] + t1;
    v[3] = v[2];
    v[2] = v[1];
    v[1] = v[0];
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; ++i) {
    h[i] += v[i];
  }
}

}  // namespace

void Sha256::Update(std::string_view data) {
  length_ += data.size();
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t left = data.size();
  if (block_used_ > 0) {
    const size_t take = std::min(left, block_.size() - block_used_);
    std::copy_n(p, take, block_.begin() + static_cast<std::ptrdiff_t>(block_used_));
    block_used_ += take;
    p += take;
    left -= take;
    if (block_used_ < block_.size()) {
      return;
    }
    Compress(h_, block_.data());
    block_used_ = 0;
  }
  for (; left >= block_.size(); p += block_.size(), left -= block_.size()) {
    Compress(h_, p);
  }
  std::copy_n(p, left, block_.begin());
  block_used_ = left;
}

std::string Sha256::HexDigest() {
  const uint64_t bit_len = length_ * 8;
  std::array<uint8_t, 72> tail{};  // 0x80, zeros, and the length: one or two blocks.
  tail[0] = 0x80;
  const size_t pad = (block_used_ < 56 ? 56 : 120) - block_used_;
  std::array<uint8_t, 8> length{};
  for (int i = 0; i < 8; ++i) {
    length[i] = static_cast<uint8_t>(bit_len >> (8 * (7 - i)));
  }
  Update(std::string_view(reinterpret_cast<const char*>(tail.data()), pad));
  Update(std::string_view(reinterpret_cast<const char*>(length.data()), length.size()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint32_t word : h_) {
    for (int shift = 28; shift >= 0; shift -= 4) {
      out.push_back(kHex[(word >> shift) & 0xf]);
    }
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.HexDigest();
}

}  // namespace stagehand
