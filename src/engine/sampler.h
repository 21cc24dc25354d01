#pragma once
// Picks the next token from a row of logits. Greedy at temperature 0; otherwise temperature,
// then top-k and top-p (nucleus) truncation, then a draw from the request's own seeded stream.
#include <cstdint>
#include <span>

#include "common/rng.h"

namespace kimi {

struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;       // <= 0: no limit
  float top_p = 1.0f;  // 1: no limit
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}
  int32_t sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  Rng rng_;
};

int32_t argmax(std::span<const float> logits);  // lowest index among equal maxima

}  // namespace kimi
