#include "model/kv_cache.h"

#include "common/error.h"

namespace kimi {

KvCache::KvCache(const ModelConfig& c, int64_t capacity_tokens)
    : capacity_(capacity_tokens), latent_dim_(c.kv_lora_rank), rope_dim_(c.qk_rope_head_dim) {
  if (capacity_tokens <= 0) throw Error("KV cache capacity must be positive");
  data_.resize(size_t(c.num_hidden_layers * capacity_ * row_width()));
}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity_)
    throw Error("KV cache length " + std::to_string(n) + " outside 0.." + std::to_string(capacity_));
  length_ = n;
}

}  // namespace kimi
