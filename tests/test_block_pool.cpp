#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/block_pool.h"

namespace kimi {
namespace {

TEST(BlockPool, AllocatesAndReleases) {
  BlockPool pool(8, 4, true);
  auto a = pool.allocate(3);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(pool.check(), "");
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.check(), "");
  EXPECT_THROW(pool.release(a), Error);  // double free is caught
  EXPECT_THROW(pool.allocate(9), Error);
}

TEST(BlockPool, CachedBlocksAreFoundUntilEvictedLeastRecentlyFreedFirst) {
  BlockPool pool(3, 2, true);
  const std::vector<int32_t> t1 = {1, 2}, t2 = {3, 4};
  auto b = pool.allocate(2);
  const uint64_t h1 = block_hash(0, t1), h2 = block_hash(h1, t2);
  pool.cache(b[0], h1, t1);
  pool.cache(b[1], h2, t2);
  pool.release(std::vector<int32_t>{b[1], b[0]});  // tail first, as the manager frees
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.lookup(h1, t1), b[0]);
  EXPECT_EQ(pool.lookup(h1, t2), std::nullopt);  // same hash, other tokens: no hit
  // A hit takes the block off the free list.
  pool.hold(b[0]);
  EXPECT_EQ(pool.num_free(), 2);
  // Two fresh blocks: the never-used one, then the least recently freed (b[1]) is evicted.
  auto c = pool.allocate(2);
  EXPECT_EQ(pool.lookup(h2, t2), std::nullopt);
  EXPECT_EQ(pool.lookup(h1, t1), b[0]);
  pool.release(c);
  pool.release(std::vector<int32_t>{b[0]});
  EXPECT_EQ(pool.check(), "");
  EXPECT_EQ(pool.num_cached(), 1);
}

TEST(BlockPool, WithoutCachingNothingIsFound) {
  BlockPool pool(2, 2, false);
  auto b = pool.allocate(1);
  const std::vector<int32_t> t = {5, 6};
  pool.cache(b[0], block_hash(0, t), t);
  EXPECT_EQ(pool.lookup(block_hash(0, t), t), std::nullopt);
  pool.release(b);
}

TEST(BlockPool, ChainHashDependsOnThePrefix) {
  const std::vector<int32_t> t = {7, 8, 9};
  EXPECT_NE(block_hash(0, t), block_hash(1, t));
  EXPECT_NE(block_hash(0, t), block_hash(0, std::vector<int32_t>{7, 8, 10}));
  EXPECT_EQ(block_hash(42, t), block_hash(42, t));
}

}  // namespace
}  // namespace kimi
