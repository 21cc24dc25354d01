#pragma once
// Gives requests the KV blocks they need (vLLM v1's KVCacheManager): a block table per request
// that grows with its tokens, prefix-cache hits at admission, room ahead for draft tokens
// (lookahead), blocks for tokens whose KV arrives from another instance (disaggregated prefill),
// rollback of a request's tail (rejected drafts), and the release of everything at the end.
// Block ids live here and in the BlockPool only: the scheduler copies a request's table into
// each step's plain-data SchedulerOutput. Only blocks whose tokens are final (computed and never
// to be rolled back) are offered to the prefix cache.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"

namespace kimi {

class KvCacheManager {
 public:
  // drop_last_hit_block: a draft model keeps KV rows in the same blocks (Eagle3, MTP), and the
  // row at a block's last position was computed from the token after it, which the block's hash
  // does not cover; such a hit gives up its last block so that row is recomputed (as vLLM does).
  KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching, bool drop_last_hit_block = false);

  const BlockPool& pool() const { return pool_; }
  int64_t block_size() const { return pool_.block_size(); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size() - 1) / block_size(); }
  int64_t num_free_blocks() const { return pool_.num_free(); }

  // The longest run of cached full blocks at the start of a waiting request's tokens, leaving
  // at least its last token to compute (the step that computes it yields the next logits).
  class PrefixHit {
   public:
    int64_t tokens() const { return int64_t(blocks_.size()) * block_size_; }

   private:
    friend class KvCacheManager;
    std::vector<int32_t> blocks_;
    int64_t block_size_ = 0;
  };
  PrefixHit find_cached_prefix(const Request& r);

  // Grows r's block table to cover, after its num_computed_tokens (plus the hit's tokens, which
  // it takes and adds to num_computed_tokens), num_external_computed_tokens whose KV another
  // instance will write (also added to num_computed_tokens), num_new_tokens to compute this step
  // and num_lookahead_tokens of room for draft tokens. Returns false, changing nothing, when the
  // free blocks do not suffice.
  bool allocate_slots(Request& r, int64_t num_new_tokens, const PrefixHit* hit = nullptr,
                      int64_t num_lookahead_tokens = 0, int64_t num_external_computed_tokens = 0);
  // Registers the full blocks among r's first num_final_tokens tokens in the prefix cache, so
  // later requests can reuse them. Tokens past num_final_tokens (drafts, KV still in flight) are
  // never registered, nor are the blocks of a request that does not share its KV (!r.shares_kv).
  void cache_blocks(const Request& r, int64_t num_final_tokens);
  // Rolls r back to its first num_tokens tokens: releases the blocks past them, and forgets the
  // prefix-cache registration of any block whose content will now change. A block that others
  // share cannot be rewritten, so if the cut falls inside one, it is released too and r keeps
  // only whole blocks. Sets and returns r.num_computed_tokens (<= num_tokens).
  int64_t truncate(Request& r, int64_t num_tokens);
  // Releases all of r's blocks, tail first so a prefix outlives its continuations.
  void free(Request& r);
  // Takes r's block table away still held, for someone outside to release later with
  // release_blocks() (a producer's blocks kept for a decode instance, a consumer's blocks a
  // transfer is still writing). Tail first, as free() would release them.
  std::vector<int32_t> detach(Request& r);
  void release_blocks(std::span<const int32_t> blocks_tail_first) { pool_.release(blocks_tail_first); }

  // r's block table, in position order (empty for an unknown request).
  std::span<const int32_t> block_ids(const std::string& request_id) const;
  int64_t num_requests() const { return int64_t(tables_.size()); }

 private:
  struct Table {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;  // chain hashes of the full blocks of the request's tokens
    int64_t registered = 0;        // leading blocks offered to the prefix cache
  };
  void update_hashes(const Request& r, Table& t, int64_t num_tokens) const;
  std::vector<int32_t> block_tokens(const Request& r, int64_t block) const;

  BlockPool pool_;
  bool drop_last_hit_block_ = false;
  std::unordered_map<std::string, Table> tables_;
};

}  // namespace kimi
