#pragma once

#include <cstdint>

namespace stagehand::iscsi {

// A LUN's size as READ CAPACITY (or the kernel's block layer) reports it.
struct LunCapacity {
  uint64_t blocks = 0;
  uint32_t block_size = 0;

  uint64_t Bytes() const { return blocks * block_size; }
};

}  // namespace stagehand::iscsi
