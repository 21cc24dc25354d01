#pragma once
// The MLA key/value cache of one sequence in its compressed form: per layer and token, the
// normalised kv_lora_rank latent followed by the rotated rope key (576 floats for Kimi-K2.5),
// instead of full keys and values for every head. Contiguous here; the serving engine's paged
// pool keeps the same row layout in fixed-size blocks.
#include <cstdint>
#include <vector>

#include "format/model_config.h"

namespace kimi {

class KvCache {
 public:
  KvCache(const ModelConfig& c, int64_t capacity_tokens);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }  // tokens whose rows are filled
  void set_length(int64_t n);                 // grow after a forward step, or shrink to truncate
  int64_t latent_dim() const { return latent_dim_; }
  int64_t row_width() const { return latent_dim_ + rope_dim_; }

  float* row(int64_t layer, int64_t pos) { return data_.data() + (layer * capacity_ + pos) * row_width(); }
  const float* row(int64_t layer, int64_t pos) const {
    return data_.data() + (layer * capacity_ + pos) * row_width();
  }
  size_t bytes() const { return data_.size() * sizeof(float); }

 private:
  int64_t capacity_, latent_dim_, rope_dim_;
  int64_t length_ = 0;
  std::vector<float> data_;
};

}  // namespace kimi
