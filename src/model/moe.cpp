#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <limits>
#include <numeric>
#include <optional>

#include "model/expert_work.h"
#include "model/moe_data_parallel.h"
#include "model/ops.h"

namespace kimi {

void mlp_forward(const MlpWeights& w, const float* x, int64_t n, ThreadPool& pool, float* out) {
  const int64_t inter = w.gate.rows;
  std::vector<float> g(static_cast<size_t>(n * inter)), u(static_cast<size_t>(n * inter));
  const MatmulJob gate_up[] = {{w.gate, x, n, g.data()}, {w.up, x, n, u.data()}};
  matmul_batch(pool, gate_up);
  silu_mul(g.data(), u.data(), n * inter);
  matmul(pool, w.down, g.data(), n, out);
  w.reduce(out, n * w.down.rows);
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

using moe_detail::ExpertWork;
using moe_detail::add_expert_work;
using moe_detail::add_routed_expert_work;
using moe_detail::run_expert_work;

void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, ThreadPool& pool, float* out,
                 MoeTiming timing) {
  if (w.data_parallel && w.data_parallel->size() > 1) return moe_forward_data_parallel(c, w, x, n, pool, out, timing);
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok, D = c.hidden_size;
  std::optional<PhaseScope> router_scope(std::in_place, timing.times, timing.layer, Phase::Router);
  std::vector<float> logits(static_cast<size_t>(n * E));
  matmul(pool, w.router, x, n, logits.data());
  const Routing r = route_tokens(c, logits.data(), n, w.correction_bias);
  router_scope.reset();
  const auto is_shared = [&](const MlpWeights* m) { return w.shared && m == &*w.shared; };

  // The work, in the order the outputs are summed: the shared experts (every token, weight 1),
  // then each selected expert with its tokens. Only the experts this rank holds (all, or its
  // range under expert parallelism): the other ranks add the rest in the block's all-reduce.
  std::vector<ExpertWork> work;
  if (w.shared)
    for (int64_t t = 0; t < n; ++t) add_expert_work(work, *w.shared, t, 1.0f);
  add_routed_expert_work(work, w, r, n, E, K);
  std::fill(out, out + n * D, 0.0f);
  run_expert_work(work, x, D, pool, out, is_shared, timing);
  w.reduce(out, n * D);
}

// Under data parallelism a replica with nothing scheduled still runs every MoE block's exchange
// (vLLM's dummy batch), with no tokens of its own.
void moe_dummy_forward(const ModelConfig& c, const MoeWeights& w, ThreadPool& pool) {
  if (w.data_parallel && w.data_parallel->size() > 1) moe_forward_data_parallel(c, w, nullptr, 0, pool, nullptr, {});
}

}  // namespace kimi
