#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "model/ops.h"

namespace kimi {

void mlp_forward(const MlpWeights& w, const float* x, int64_t n, ThreadPool& pool, float* out) {
  const int64_t inter = w.gate.rows;
  std::vector<float> g(static_cast<size_t>(n * inter)), u(static_cast<size_t>(n * inter));
  matmul(pool, w.gate, x, n, g.data());
  matmul(pool, w.up, x, n, u.data());
  silu_mul(g.data(), u.data(), n * inter);
  matmul(pool, w.down, g.data(), n, out);
}

Routing route_tokens(const ModelConfig& c, const float* router_logits, int64_t n, const std::vector<float>& bias) {
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok;
  const int64_t groups = c.n_group, per_group = E / groups;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  Routing r;
  r.experts.resize(size_t(n * K));
  r.weights.resize(size_t(n * K));
  std::vector<float> scores(static_cast<size_t>(E)), choice(static_cast<size_t>(E)), group_score(static_cast<size_t>(groups));
  std::vector<int32_t> order(static_cast<size_t>(std::max(E, groups)));

  for (int64_t t = 0; t < n; ++t) {
    const float* logits = router_logits + t * E;
    if (c.scoring_func == "sigmoid") {
      for (int64_t e = 0; e < E; ++e) scores[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    } else {
      std::copy(logits, logits + E, scores.begin());
      softmax(scores.data(), E);
    }
    // The correction bias balances load by steering which experts are chosen; the gate values
    // below still come from the unbiased scores.
    for (int64_t e = 0; e < E; ++e) choice[size_t(e)] = scores[size_t(e)] + (bias.empty() ? 0.0f : bias[size_t(e)]);

    if (groups > 1 && c.topk_method != "greedy") {
      for (int64_t g = 0; g < groups; ++g) {
        float* begin = &choice[size_t(g * per_group)];
        if (c.topk_method == "noaux_tc") {  // a group's score: the sum of its two best experts
          float best = kMasked, second = kMasked;
          for (int64_t i = 0; i < per_group; ++i) {
            if (begin[i] > best) second = best, best = begin[i];
            else if (begin[i] > second) second = begin[i];
          }
          group_score[size_t(g)] = per_group > 1 ? best + second : best;
        } else {
          group_score[size_t(g)] = *std::max_element(begin, begin + per_group);
        }
      }
      std::iota(order.begin(), order.begin() + groups, 0);
      std::partial_sort(order.begin(), order.begin() + c.topk_group, order.begin() + groups,
                        [&](int32_t a, int32_t b) { return group_score[size_t(a)] > group_score[size_t(b)]; });
      std::vector<bool> keep(size_t(groups), false);
      for (int64_t i = 0; i < c.topk_group; ++i) keep[size_t(order[size_t(i)])] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!keep[size_t(e / per_group)]) choice[size_t(e)] = kMasked;
    }

    std::iota(order.begin(), order.begin() + E, 0);
    std::partial_sort(order.begin(), order.begin() + K, order.begin() + E,
                      [&](int32_t a, int32_t b) { return choice[size_t(a)] > choice[size_t(b)]; });
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += scores[size_t(order[size_t(k)])];
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = order[size_t(k)];
      double wgt = scores[size_t(e)];
      if (K > 1 && c.norm_topk_prob) wgt /= (sum + 1e-20);
      r.experts[size_t(t * K + k)] = e;
      r.weights[size_t(t * K + k)] = float(wgt * c.routed_scaling_factor);
    }
  }
  return r;
}

void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, ThreadPool& pool, float* out) {
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok, D = c.hidden_size;
  std::vector<float> logits(static_cast<size_t>(n * E));
  matmul(pool, w.router, x, n, logits.data());
  const Routing r = route_tokens(c, logits.data(), n, w.correction_bias);

  // Shared experts see every token; their output starts the sum.
  if (w.shared) mlp_forward(*w.shared, x, n, pool, out);
  else std::fill(out, out + n * D, 0.0f);

  // Group the tokens by expert so each expert's weights are read once per step, whatever the batch.
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(E));  // indices into r.experts
  for (int64_t i = 0; i < n * K; ++i) slots[size_t(r.experts[size_t(i)])].push_back(i);
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < E; ++e) {
    const auto& s = slots[size_t(e)];
    if (s.empty()) continue;
    const int64_t m = int64_t(s.size());
    xs.resize(size_t(m * D));
    ys.resize(size_t(m * D));
    for (int64_t i = 0; i < m; ++i) std::memcpy(&xs[size_t(i * D)], x + (s[size_t(i)] / K) * D, size_t(D) * 4);
    mlp_forward(w.experts[size_t(e)], xs.data(), m, pool, ys.data());
    for (int64_t i = 0; i < m; ++i) {
      const float g = r.weights[size_t(s[size_t(i)])];
      float* o = out + (s[size_t(i)] / K) * D;
      const float* y = &ys[size_t(i * D)];
      for (int64_t j = 0; j < D; ++j) o[j] += g * y[j];
    }
  }
}

}  // namespace kimi
