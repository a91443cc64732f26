#include "session/io_request.h"

#include <gtest/gtest.h>

namespace stagehand::session {
namespace {

TEST(BufferPoolTest, ReusesStandardBuffers) {
  BufferPool pool;
  size_t size = 0;
  auto first = pool.Take(4096, &size);
  EXPECT_EQ(size, BufferPool::kBufferBytes);
  uint8_t* const address = first.get();
  pool.Give(std::move(first), size);
  auto again = pool.Take(BufferPool::kBufferBytes, &size);
  EXPECT_EQ(again.get(), address);
}

TEST(BufferPoolTest, LargerBuffersAreOneOffs) {
  BufferPool pool;
  size_t size = 0;
  auto big = pool.Take(BufferPool::kBufferBytes + 1, &size);
  EXPECT_EQ(size, BufferPool::kBufferBytes + 1);
  pool.Give(std::move(big), size);
  EXPECT_EQ(pool.spares(), 0U);
}

TEST(BufferPoolTest, KeepsAtMostTheSpareLimit) {
  BufferPool pool;
  std::vector<std::unique_ptr<uint8_t[]>> taken;
  size_t size = 0;
  for (size_t i = 0; i < BufferPool::kMaxSpare + 4; ++i) {
    taken.push_back(pool.Take(4096, &size));
  }
  std::vector<uint8_t*> given;
  for (auto& buffer : taken) {
    given.push_back(buffer.get());
    pool.Give(std::move(buffer), size);
  }
  EXPECT_EQ(pool.spares(), BufferPool::kMaxSpare);
  // The first kMaxSpare came back; they are handed out again last-in first-out.
  for (size_t i = 0; i < BufferPool::kMaxSpare; ++i) {
    auto buffer = pool.Take(4096, &size);
    EXPECT_EQ(buffer.get(), given[BufferPool::kMaxSpare - 1 - i]);
  }
}

TEST(IoRequestTest, GivesItsBufferBackWhenDestroyed) {
  BufferPool pool;
  uint8_t* address = nullptr;
  {
    IoRequest r;
    r.AllocateBuffer(pool, 4096);
    address = r.buffer.get();
  }
  size_t size = 0;
  EXPECT_EQ(pool.Take(4096, &size).get(), address);
}

}  // namespace
}  // namespace stagehand::session
