#pragma once
// Bookkeeping of the paged KV cache's blocks (the memory is a KvStorage): which blocks are free,
// how many sequences hold each, and which full blocks can be reused by content (prefix caching).
// A block whose last holder lets go stays findable by its hash until it is evicted; free blocks
// are handed out least-recently-freed first, so popular prefixes survive longest.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace kimi {

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int64_t block_size, bool enable_caching);

  int64_t num_blocks() const { return int64_t(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_free() const { return num_free_; }  // including cached blocks nobody holds
  int64_t num_cached() const { return int64_t(by_hash_.size()); }
  bool caching() const { return caching_; }
  double usage() const { return 1.0 - double(num_free_) / double(blocks_.size()); }

  // n fresh blocks, each held once; evicts the least recently freed cached blocks as needed.
  // Precondition: n <= num_free().
  std::vector<int32_t> allocate(int64_t n);
  // Drops one hold on each block; blocks nobody holds become free (in the given order).
  void release(std::span<const int32_t> blocks);
  // A cached full block with exactly these tokens after the prefix whose chain hash is `hash`.
  std::optional<int32_t> lookup(uint64_t hash, std::span<const int32_t> tokens) const;
  // Adds a hold to a block found by lookup (taking it off the free list if nobody held it).
  void hold(int32_t block);
  // Registers a full block's content so later requests can find it (no-op without caching, or
  // when another block already caches this content).
  void cache(int32_t block, uint64_t hash, std::span<const int32_t> tokens);

  // Forgets a block's cached content (it is about to be overwritten); no-op if not cached.
  void uncache(int32_t block);
  bool is_cached(int32_t block) const { return blocks_[size_t(block)].cached; }

  int32_t holders(int32_t block) const { return blocks_[size_t(block)].holders; }
  // Consistency check for tests: free count, free list and holders agree. Empty means fine.
  std::string check() const;

 private:
  struct Block {
    int32_t holders = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // content of a cached block, to rule out hash collisions
    int32_t prev = -1, next = -1; // free list links
  };
  void push_free(int32_t b);
  void unlink_free(int32_t b);

  int64_t block_size_;
  bool caching_;
  std::vector<Block> blocks_;
  int32_t free_head_ = -1, free_tail_ = -1;
  int64_t num_free_ = 0;
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

// The chain hash of a full block: its tokens and the hash of everything before it, so equal
// hashes mean equal prefixes (up to collisions, which lookup rules out by comparing tokens).
uint64_t block_hash(uint64_t parent_hash, std::span<const int32_t> tokens);

}  // namespace kimi
