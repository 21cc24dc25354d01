#pragma once
// Rotary position embedding of the MLA rope dims, with YaRN context extension as the
// DeepSeek-V3 modelling code defines it. Dimensions rotate in adjacent pairs (2i, 2i+1) with
// frequency inv_freq[i]: the complex-number form of DeepSeek's inference/model.py. (The HF code
// de-interleaves first and rotates halves, which only permutes the output; q.k is unchanged.)
#include <cstdint>
#include <vector>

#include "format/model_config.h"

namespace kimi {

class Rope {
 public:
  explicit Rope(const ModelConfig& c);

  int64_t dim() const { return dim_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  // Rotates `count` vectors of dim() floats, `stride` floats apart, all at `position`.
  void apply(float* x, int64_t count, int64_t stride, int64_t position) const;

 private:
  int64_t dim_;
  std::vector<double> inv_freq_;
  double cos_sin_scale_;  // YaRN: mscale(factor, mscale) / mscale(factor, mscale_all_dim)
};

// The YaRN frequency blend, exposed for tests: for each pair i, a weight in [0, 1] of the
// extrapolated (original) frequency against the interpolated one (freq / factor).
std::vector<double> yarn_extrapolation_weights(int64_t dim, double base, const RopeScaling& s);

}  // namespace kimi
