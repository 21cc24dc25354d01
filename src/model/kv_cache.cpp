#include "model/kv_cache.h"

#include <string>

#include "common/error.h"

namespace kimi {

KvStorage::KvStorage(const ModelConfig& c, int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size), row_width_(c.kv_lora_rank + c.qk_rope_head_dim) {
  if (num_blocks <= 0 || block_size <= 0) throw Error("KV cache needs a positive number of blocks and block size");
  size_ = size_t(c.num_hidden_layers * num_blocks * block_size * row_width_);
  data_ = std::make_unique_for_overwrite<float[]>(size_);
}

size_t KvStorage::bytes_per_block(const ModelConfig& c, int64_t block_size) {
  return size_t(c.num_hidden_layers * block_size * (c.kv_lora_rank + c.qk_rope_head_dim)) * sizeof(float);
}

KvCache::KvCache(const ModelConfig& c, int64_t capacity_tokens) : storage_(c, 1, capacity_tokens) {}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity())
    throw Error("KV cache length " + std::to_string(n) + " outside 0.." + std::to_string(capacity()));
  length_ = n;
}

}  // namespace kimi
