#include "engine/kv_cache_manager.h"

#include <algorithm>

namespace kimi {

KvCacheManager::KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks, block_size, enable_prefix_caching) {}

void KvCacheManager::update_hashes(Request& r) {
  const int64_t full = r.num_tokens() / block_size();
  std::vector<int32_t> tokens(static_cast<size_t>(block_size()));
  while (int64_t(r.block_hashes.size()) < full) {
    const int64_t b = int64_t(r.block_hashes.size());
    for (int64_t i = 0; i < block_size(); ++i) tokens[size_t(i)] = r.token_at(b * block_size() + i);
    r.block_hashes.push_back(block_hash(b ? r.block_hashes.back() : 0, tokens));
  }
}

KvCacheManager::PrefixHit KvCacheManager::find_cached_prefix(Request& r) {
  PrefixHit hit;
  // Prompt logprobs come from computing the prompt, so a request asking for them reads nothing
  // from the cache (as in vLLM); its blocks are still offered to it for others.
  if (!pool_.caching() || r.params.prompt_logprobs) return hit;
  update_hashes(r);
  const int64_t max_blocks = (r.num_tokens() - 1) / block_size();
  std::vector<int32_t> tokens(static_cast<size_t>(block_size()));
  for (int64_t b = 0; b < max_blocks; ++b) {
    for (int64_t i = 0; i < block_size(); ++i) tokens[size_t(i)] = r.token_at(b * block_size() + i);
    const auto found = pool_.lookup(r.block_hashes[size_t(b)], tokens);
    if (!found) break;
    hit.blocks.push_back(*found);
  }
  hit.tokens = int64_t(hit.blocks.size()) * block_size();
  return hit;
}

bool KvCacheManager::allocate(Request& r, int64_t num_new_tokens, const PrefixHit* hit) {
  const int64_t hit_blocks = hit ? int64_t(hit->blocks.size()) : 0;
  const int64_t computed = r.num_computed_tokens + (hit ? hit->tokens : 0);
  const int64_t needed = blocks_for(computed + num_new_tokens) - int64_t(r.block_table.size()) - hit_blocks;
  // Hit blocks nobody holds are counted as free; holding them takes them out of the free pool.
  int64_t hit_unheld = 0;
  for (int64_t i = 0; i < hit_blocks; ++i) hit_unheld += pool_.holders(hit->blocks[size_t(i)]) == 0;
  if (std::max<int64_t>(needed, 0) + hit_unheld > pool_.num_free()) return false;
  if (hit) {
    for (int32_t b : hit->blocks) pool_.hold(b);
    r.block_table.insert(r.block_table.end(), hit->blocks.begin(), hit->blocks.end());
    r.num_computed_tokens = computed;
  }
  if (needed > 0) {
    const auto fresh = pool_.allocate(needed);
    r.block_table.insert(r.block_table.end(), fresh.begin(), fresh.end());
  }
  return true;
}

void KvCacheManager::cache_full_blocks(Request& r) {
  if (!pool_.caching()) return;
  update_hashes(r);
  const int64_t full = std::min<int64_t>(r.num_computed_tokens / block_size(), int64_t(r.block_hashes.size()));
  std::vector<int32_t> tokens(static_cast<size_t>(block_size()));
  for (int64_t b = r.blocks_registered; b < full; ++b) {
    for (int64_t i = 0; i < block_size(); ++i) tokens[size_t(i)] = r.token_at(b * block_size() + i);
    pool_.cache(r.block_table[size_t(b)], r.block_hashes[size_t(b)], tokens);
  }
  r.blocks_registered = std::max(r.blocks_registered, full);
}

void KvCacheManager::free(Request& r) {
  std::vector<int32_t> reversed(r.block_table.rbegin(), r.block_table.rend());
  pool_.release(reversed);
  r.block_table.clear();
  r.num_computed_tokens = 0;
  r.blocks_registered = 0;
}

}  // namespace kimi
