#pragma once
// Gives requests the KV blocks they need (vLLM's KVCacheManager): a block table per request that
// grows with its tokens, prefix-cache hits at admission, and the release of everything at the
// end. The only component that touches the BlockPool.
#include <cstdint>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"

namespace kimi {

class KvCacheManager {
 public:
  KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);

  const BlockPool& pool() const { return pool_; }
  int64_t block_size() const { return pool_.block_size(); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size() - 1) / block_size(); }

  // The longest run of cached full blocks at the start of a waiting request's tokens, leaving
  // at least its last token to compute (the step that computes it yields the next logits).
  struct PrefixHit {
    std::vector<int32_t> blocks;
    int64_t tokens = 0;
  };
  PrefixHit find_cached_prefix(Request& r);

  // Grows r's block table to cover num_computed_tokens (+ hit) + num_new_tokens, holding the hit's
  // blocks first. Returns false, changing nothing, when the free blocks do not suffice.
  bool allocate(Request& r, int64_t num_new_tokens, const PrefixHit* hit = nullptr);
  // Registers r's blocks that its computed tokens have filled, so later requests can reuse them.
  void cache_full_blocks(Request& r);
  // Releases all of r's blocks, tail first so a prefix outlives its continuations.
  void free(Request& r);

 private:
  void update_hashes(Request& r);
  BlockPool pool_;
};

}  // namespace kimi
