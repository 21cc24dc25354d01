#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kimi {

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.temperature <= 0.0f) return argmax(logits);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  size_t keep = ids.size();
  if (params_.top_k > 0 && size_t(params_.top_k) < keep) keep = size_t(params_.top_k);
  std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(keep), ids.end(), by_logit);
  ids.resize(keep);

  std::vector<double> p(keep);
  const double mx = logits[size_t(ids[0])];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[size_t(ids[i])] - mx) / params_.temperature);
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += p[n++] / sum;
      if (cum >= params_.top_p) break;
    }
    keep = n;
    sum = std::accumulate(p.begin(), p.begin() + ptrdiff_t(keep), 0.0);
  }
  double r = rng_.uniform() * sum;
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r < 0) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace kimi
