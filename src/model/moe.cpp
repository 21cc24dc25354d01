#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <limits>
#include <numeric>
#include <optional>

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

namespace {

// One MLP's share of a step: its tokens (rows of the input) and the gate applied to its outputs.
// An item holds at most kSlotsPerBatch tokens (a long prefill splits an expert's tokens over
// several), which bounds the buffers of run_expert_work.
constexpr int64_t kSlotsPerBatch = 256;
struct ExpertWork {
  const MlpWeights* mlp;
  std::vector<int64_t> tokens;
  std::vector<float> gates;
};

void add_expert_work(std::vector<ExpertWork>& work, const MlpWeights& mlp, int64_t token, float gate) {
  if (work.empty() || work.back().mlp != &mlp || int64_t(work.back().tokens.size()) == kSlotsPerBatch)
    work.push_back(ExpertWork{&mlp, {}, {}});
  work.back().tokens.push_back(token);
  work.back().gates.push_back(gate);
}

// The selected experts this rank holds (all, or its range under expert parallelism), each with
// its tokens, grouped so that an expert's weights are read once per step whatever the batch.
void add_routed_expert_work(std::vector<ExpertWork>& work, const MoeWeights& w, const Routing& r, int64_t n, int64_t E, int64_t K) {
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(E));  // indices into r.experts
  for (int64_t i = 0; i < n * K; ++i) slots[size_t(r.experts[size_t(i)])].push_back(i);
  for (int64_t j = 0; j < int64_t(w.experts.size()); ++j)
    for (int64_t s : slots[size_t(w.first_expert + j)]) add_expert_work(work, w.experts[size_t(j)], s / K, r.weights[size_t(s)]);
}

// out[token] += gate * mlp(x[token]) for every item, out already zeroed. The items run in
// batches: one matmul_batch for the gate and up products of a batch's items and one for their
// down products, so a decode step pays two thread dispatches for its experts instead of three
// per expert. A batch holds up to kSlotsPerBatch token rows.
void run_expert_work(const std::vector<ExpertWork>& work, const float* x, int64_t D, ThreadPool& pool, float* out,
              const std::function<bool(const MlpWeights*)>& is_shared, MoeTiming timing) {
  std::vector<float> xs, gs, us, ys;
  std::vector<MatmulJob> jobs;
  for (size_t first = 0; first < work.size();) {
    const bool shared_batch = is_shared(work[first].mlp);
    PhaseScope scope(timing.times, timing.layer, shared_batch ? Phase::SharedExpert : Phase::RoutedExperts);
    size_t last = first;
    int64_t rows = 0, inter_rows = 0;
    do {
      rows += int64_t(work[last].tokens.size());
      inter_rows += int64_t(work[last].tokens.size()) * work[last].mlp->gate.rows;
      ++last;
    } while (last < work.size() && rows + int64_t(work[last].tokens.size()) <= kSlotsPerBatch &&
             !(timing.times && is_shared(work[last].mlp) != shared_batch));
    xs.resize(size_t(rows * D));
    ys.resize(size_t(rows * D));
    gs.resize(size_t(inter_rows));
    us.resize(size_t(inter_rows));
    // Row offsets of each expert's tokens in xs / ys and in gs / us.
    std::vector<int64_t> row0(last - first + 1, 0), inter0(last - first + 1, 0);
    for (size_t i = first; i < last; ++i) {
      const ExpertWork& wk = work[i];
      const int64_t m = int64_t(wk.tokens.size());
      row0[i - first + 1] = row0[i - first] + m;
      inter0[i - first + 1] = inter0[i - first] + m * wk.mlp->gate.rows;
      for (int64_t t = 0; t < m; ++t)
        std::memcpy(&xs[size_t((row0[i - first] + t) * D)], x + wk.tokens[size_t(t)] * D, size_t(D) * 4);
    }
    jobs.clear();
    for (size_t i = first; i < last; ++i) {
      const MlpWeights& m = *work[i].mlp;
      const int64_t tokens = int64_t(work[i].tokens.size());
      const float* xi = &xs[size_t(row0[i - first] * D)];
      jobs.push_back({m.gate, xi, tokens, &gs[size_t(inter0[i - first])]});
      jobs.push_back({m.up, xi, tokens, &us[size_t(inter0[i - first])]});
    }
    matmul_batch(pool, jobs);
    silu_mul(gs.data(), us.data(), inter_rows);
    jobs.clear();
    for (size_t i = first; i < last; ++i)
      jobs.push_back({work[i].mlp->down, &gs[size_t(inter0[i - first])], int64_t(work[i].tokens.size()),
                      &ys[size_t(row0[i - first] * D)]});
    matmul_batch(pool, jobs);
    for (size_t i = first; i < last; ++i) {
      const ExpertWork& wk = work[i];
      for (size_t t = 0; t < wk.tokens.size(); ++t) {
        const float g = wk.gates[t];
        float* o = out + wk.tokens[t] * D;
        const float* y = &ys[size_t((row0[i - first] + int64_t(t)) * D)];
        for (int64_t j = 0; j < D; ++j) o[j] += g * y[j];
      }
    }
    first = last;
  }
}

// The MoE block under data parallelism (MoeWeights::data_parallel): every DP replica's tokens are
// gathered (the same on every rank), each rank runs the routed experts it holds on all of them,
// the routed outputs are summed over all tp x dp ranks and each replica keeps its own rows; the
// shared experts run on this replica's tokens only. A replica without tokens (n = 0, a dummy
// step) still takes part, so that every rank makes the same collectives.
void moe_forward_data_parallel(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, ThreadPool& pool,
                               float* out, MoeTiming timing) {
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok, D = c.hidden_size;
  Communicator& dp = *w.data_parallel;
  const int replicas = dp.size();
  std::vector<int64_t> counts(size_t(replicas), 0);
  dp.all_gather(std::as_bytes(std::span<const int64_t>(&n, 1)), std::as_writable_bytes(std::span<int64_t>(counts)));
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  if (most == 0) return;  // no replica has tokens: nothing to exchange (every rank sees the same counts)

  // Gather: each replica's rows padded to the largest count, then compacted.
  std::vector<float> mine(size_t(most * D), 0.0f), padded(size_t(replicas * most * D));
  if (n > 0) std::memcpy(mine.data(), x, size_t(n * D) * 4);
  dp.all_gather(std::as_bytes(std::span<const float>(mine)), std::as_writable_bytes(std::span<float>(padded)));
  int64_t total = 0, my_first = 0;
  std::vector<float> xs;
  xs.reserve(size_t(replicas * most * D));
  for (int r = 0; r < replicas; ++r) {
    if (r == dp.rank()) my_first = total;
    const float* rows = &padded[size_t(r * most * D)];
    xs.insert(xs.end(), rows, rows + counts[size_t(r)] * D);
    total += counts[size_t(r)];
  }

  std::optional<PhaseScope> router_scope(std::in_place, timing.times, timing.layer, Phase::Router);
  std::vector<float> logits(static_cast<size_t>(total * E));
  matmul(pool, w.router, xs.data(), total, logits.data());
  const Routing r = route_tokens(c, logits.data(), total, w.correction_bias);
  router_scope.reset();
  std::vector<ExpertWork> routed;
  add_routed_expert_work(routed, w, r, total, E, K);
  std::vector<float> ys(size_t(total * D), 0.0f);
  const auto never_shared = [](const MlpWeights*) { return false; };
  run_expert_work(routed, xs.data(), D, pool, ys.data(), never_shared, timing);
  w.routed_reduce(ys.data(), total * D);

  if (n == 0) return;
  std::fill(out, out + n * D, 0.0f);
  if (w.shared) {
    std::vector<ExpertWork> shared;
    for (int64_t t = 0; t < n; ++t) add_expert_work(shared, *w.shared, t, 1.0f);
    run_expert_work(shared, x, D, pool, out, [](const MlpWeights*) { return true; }, timing);
    w.reduce(out, n * D);
  }
  const float* y = &ys[size_t(my_first * D)];
  for (int64_t i = 0; i < n * D; ++i) out[i] += y[i];
}

}  // namespace

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
