#include "engine/block_pool.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace kimi {

uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  // splitmix-style mixing of each token into the running state.
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int32_t t : tokens) {
    h ^= uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, bool enable_caching)
    : block_size_(block_size), caching_(enable_caching), blocks_(size_t(num_blocks)) {
  if (num_blocks <= 0 || block_size <= 0) throw Error("the KV cache needs at least one block of at least one token");
  for (int32_t b = 0; b < int32_t(num_blocks); ++b) push_free(b);
}

void BlockPool::push_free(int32_t b) {
  Block& blk = blocks_[size_t(b)];
  blk.prev = free_tail_;
  blk.next = -1;
  if (free_tail_ >= 0) blocks_[size_t(free_tail_)].next = b;
  else free_head_ = b;
  free_tail_ = b;
  ++num_free_;
}

void BlockPool::unlink_free(int32_t b) {
  Block& blk = blocks_[size_t(b)];
  if (blk.prev >= 0) blocks_[size_t(blk.prev)].next = blk.next;
  else free_head_ = blk.next;
  if (blk.next >= 0) blocks_[size_t(blk.next)].prev = blk.prev;
  else free_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  --num_free_;
}

void BlockPool::uncache(int32_t b) {
  Block& blk = blocks_[size_t(b)];
  if (!blk.cached) return;
  by_hash_.erase(blk.hash);
  blk.cached = false;
  blk.tokens.clear();
}

std::vector<int32_t> BlockPool::allocate(int64_t n) {
  if (n > num_free_) throw Error("internal: allocating " + std::to_string(n) + " KV blocks with " +
                                 std::to_string(num_free_) + " free");
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_head_;
    unlink_free(b);
    uncache(b);  // evicted: its old content is about to be overwritten
    blocks_[size_t(b)].holders = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::release(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    Block& blk = blocks_[size_t(b)];
    if (blk.holders <= 0) throw Error("internal: releasing KV block " + std::to_string(b) + " that nobody holds");
    if (--blk.holders == 0) push_free(b);
  }
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash, std::span<const int32_t> tokens) const {
  if (!caching_) return std::nullopt;
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const Block& blk = blocks_[size_t(it->second)];
  if (!std::equal(tokens.begin(), tokens.end(), blk.tokens.begin(), blk.tokens.end())) return std::nullopt;
  return it->second;
}

void BlockPool::hold(int32_t b) {
  Block& blk = blocks_[size_t(b)];
  if (blk.holders++ == 0) unlink_free(b);
}

void BlockPool::cache(int32_t b, uint64_t hash, std::span<const int32_t> tokens) {
  if (!caching_) return;
  Block& blk = blocks_[size_t(b)];
  if (blk.cached || by_hash_.count(hash)) return;
  blk.cached = true;
  blk.hash = hash;
  blk.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, b);
}

std::string BlockPool::check() const {
  int64_t listed = 0;
  for (int32_t b = free_head_; b >= 0; b = blocks_[size_t(b)].next) {
    if (blocks_[size_t(b)].holders != 0) return "held block " + std::to_string(b) + " on the free list";
    if (++listed > num_blocks()) return "free list has a cycle";
  }
  if (listed != num_free_) return "free count " + std::to_string(num_free_) + " but " + std::to_string(listed) + " listed";
  int64_t unheld = 0;
  for (const Block& blk : blocks_) unheld += blk.holders == 0;
  if (unheld != num_free_) return std::to_string(unheld) + " blocks unheld but " + std::to_string(num_free_) + " free";
  return {};
}

}  // namespace kimi
