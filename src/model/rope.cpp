#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kimi {

namespace {

// The dimension index whose wavelength completes `rotations` turns over the original context.
double correction_dim(double rotations, int64_t dim, double base, double max_pos) {
  return double(dim) * std::log(max_pos / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

std::vector<double> yarn_extrapolation_weights(int64_t dim, double base, const RopeScaling& s) {
  const double orig = double(s.original_max_position_embeddings);
  double low = std::floor(correction_dim(s.beta_fast, dim, base, orig));
  double high = std::ceil(correction_dim(s.beta_slow, dim, base, orig));
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  std::vector<double> w(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < w.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    w[i] = 1.0 - ramp;  // high-frequency pairs (small i) keep their original frequency
  }
  return w;
}

Rope::Rope(const ModelConfig& c) : dim_(c.qk_rope_head_dim), inv_freq_(size_t(c.qk_rope_head_dim / 2)), cos_sin_scale_(1.0) {
  const double base = c.rope_theta;
  for (size_t i = 0; i < inv_freq_.size(); ++i) inv_freq_[i] = 1.0 / std::pow(base, double(2 * i) / double(dim_));
  if (c.rope_scaling.type == "yarn") {
    const RopeScaling& s = c.rope_scaling;
    const auto extrapolate = yarn_extrapolation_weights(dim_, base, s);
    for (size_t i = 0; i < inv_freq_.size(); ++i)
      inv_freq_[i] = inv_freq_[i] / s.factor * (1.0 - extrapolate[i]) + inv_freq_[i] * extrapolate[i];
    cos_sin_scale_ = yarn_get_mscale(s.factor, s.mscale) / yarn_get_mscale(s.factor, s.mscale_all_dim);
  }
}

void Rope::apply(float* x, int64_t count, int64_t stride, int64_t position) const {
  const size_t half = inv_freq_.size();
  // Angles in double: position * inv_freq loses digits in f32 at long contexts.
  float cs[256], sn[256];
  for (size_t i = 0; i < half; ++i) {
    const double a = double(position) * inv_freq_[i];
    cs[i] = float(std::cos(a) * cos_sin_scale_);
    sn[i] = float(std::sin(a) * cos_sin_scale_);
  }
  for (int64_t v = 0; v < count; ++v) {
    float* p = x + v * stride;
    for (size_t i = 0; i < half; ++i) {
      const float re = p[2 * i], im = p[2 * i + 1];
      p[2 * i] = re * cs[i] - im * sn[i];
      p[2 * i + 1] = re * sn[i] + im * cs[i];
    }
  }
}

}  // namespace kimi
