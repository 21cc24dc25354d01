#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "common/error.h"

namespace kimi {

KvCacheManager::KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                               bool drop_last_hit_block)
    : pool_(num_blocks, block_size, enable_prefix_caching), drop_last_hit_block_(drop_last_hit_block) {}

std::vector<int32_t> KvCacheManager::block_tokens(const Request& r, int64_t block) const {
  std::vector<int32_t> tokens(static_cast<size_t>(block_size()));
  for (int64_t i = 0; i < block_size(); ++i) tokens[size_t(i)] = r.token_at(block * block_size() + i);
  return tokens;
}

void KvCacheManager::update_hashes(const Request& r, Table& t, int64_t num_tokens) const {
  const int64_t full = std::min(num_tokens, r.num_tokens()) / block_size();
  while (int64_t(t.hashes.size()) < full) {
    const int64_t b = int64_t(t.hashes.size());
    t.hashes.push_back(block_hash(b ? t.hashes.back() : 0, block_tokens(r, b)));
  }
}

KvCacheManager::PrefixHit KvCacheManager::find_cached_prefix(const Request& r) {
  PrefixHit hit;
  hit.block_size_ = block_size();
  // Prompt logprobs come from computing the prompt, so a request asking for them reads nothing
  // from the cache (as in vLLM); its blocks are still offered to others.
  if (!pool_.caching() || r.params.prompt_logprobs) return hit;
  const int64_t max_blocks = (r.num_tokens() - 1) / block_size();
  uint64_t hash = 0;
  for (int64_t b = 0; b < max_blocks; ++b) {
    const std::vector<int32_t> tokens = block_tokens(r, b);
    hash = block_hash(hash, tokens);
    const auto found = pool_.lookup(hash, tokens);
    if (!found) break;
    hit.blocks_.push_back(*found);
  }
  if (drop_last_hit_block_ && !hit.blocks_.empty()) hit.blocks_.pop_back();
  return hit;
}

bool KvCacheManager::allocate_slots(Request& r, int64_t num_new_tokens, const PrefixHit* hit,
                                    int64_t num_lookahead_tokens, int64_t num_external_computed_tokens) {
  Table& t = tables_[r.id];
  const int64_t hit_blocks = hit ? int64_t(hit->blocks_.size()) : 0;
  if (hit_blocks && !t.blocks.empty()) throw Error("internal: a prefix hit for a request that already has blocks");
  const int64_t computed = r.num_computed_tokens + (hit ? hit->tokens() : 0) + num_external_computed_tokens;
  const int64_t needed =
      blocks_for(computed + num_new_tokens + num_lookahead_tokens) - int64_t(t.blocks.size()) - hit_blocks;
  // Hit blocks nobody holds are counted as free; holding them takes them out of the free pool.
  int64_t hit_unheld = 0;
  for (int64_t i = 0; i < hit_blocks; ++i) hit_unheld += pool_.holders(hit->blocks_[size_t(i)]) == 0;
  if (std::max<int64_t>(needed, 0) + hit_unheld > pool_.num_free()) {
    if (t.blocks.empty()) tables_.erase(r.id);
    return false;
  }
  if (hit) {
    for (int32_t b : hit->blocks_) pool_.hold(b);
    t.blocks.insert(t.blocks.end(), hit->blocks_.begin(), hit->blocks_.end());
    t.registered = hit_blocks;  // found in the cache: registered already
  }
  if (needed > 0) {
    const auto fresh = pool_.allocate(needed);
    t.blocks.insert(t.blocks.end(), fresh.begin(), fresh.end());
  }
  r.num_computed_tokens = computed;
  return true;
}

void KvCacheManager::cache_blocks(const Request& r, int64_t num_final_tokens) {
  if (!pool_.caching() || !r.shares_kv) return;
  auto it = tables_.find(r.id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  update_hashes(r, t, num_final_tokens);
  const int64_t full = std::min<int64_t>({num_final_tokens / block_size(), int64_t(t.hashes.size()),
                                          int64_t(t.blocks.size())});
  for (int64_t b = t.registered; b < full; ++b) pool_.cache(t.blocks[size_t(b)], t.hashes[size_t(b)], block_tokens(r, b));
  t.registered = std::max(t.registered, full);
}

int64_t KvCacheManager::truncate(Request& r, int64_t num_tokens) {
  auto it = tables_.find(r.id);
  num_tokens = std::clamp<int64_t>(num_tokens, 0, r.num_computed_tokens);
  if (it == tables_.end()) return r.num_computed_tokens = 0;
  Table& t = it->second;
  int64_t keep = blocks_for(num_tokens);
  if (num_tokens % block_size() != 0) {
    // The cut falls inside the last kept block, whose tail will be rewritten: that is only
    // allowed on a block r alone holds; its cached content (if any) is no longer what it holds.
    const int32_t last = t.blocks[size_t(keep - 1)];
    if (pool_.holders(last) > 1) --keep;
    else pool_.uncache(last);
  }
  if (keep < int64_t(t.blocks.size())) {
    std::vector<int32_t> tail(t.blocks.rbegin(), t.blocks.rend() - keep);
    for (int32_t b : tail)
      if (pool_.holders(b) == 1) pool_.uncache(b);  // its content is about to be replaced
    pool_.release(tail);
    t.blocks.resize(size_t(keep));
  }
  const int64_t full_kept = std::min(num_tokens / block_size(), keep);
  t.hashes.resize(std::min(t.hashes.size(), size_t(full_kept)));
  t.registered = std::min(t.registered, full_kept);
  r.num_computed_tokens = std::min(num_tokens, keep * block_size());
  return r.num_computed_tokens;
}

void KvCacheManager::free(Request& r) {
  auto it = tables_.find(r.id);
  if (it != tables_.end()) {
    std::vector<int32_t> reversed(it->second.blocks.rbegin(), it->second.blocks.rend());
    pool_.release(reversed);
    tables_.erase(it);
  }
  r.num_computed_tokens = 0;
}

std::vector<int32_t> KvCacheManager::detach(Request& r) {
  std::vector<int32_t> blocks;
  auto it = tables_.find(r.id);
  if (it != tables_.end()) {
    blocks.assign(it->second.blocks.rbegin(), it->second.blocks.rend());
    tables_.erase(it);
  }
  return blocks;
}

std::span<const int32_t> KvCacheManager::block_ids(const std::string& request_id) const {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return {};
  return it->second.blocks;
}

}  // namespace kimi
