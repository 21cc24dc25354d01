#include "model/expert_work.h"

#include <cstring>

namespace kimi::moe_detail {

void add_expert_work(std::vector<ExpertWork>& work, const MlpWeights& mlp, int64_t token, float gate) {
  if (work.empty() || work.back().mlp != &mlp || int64_t(work.back().tokens.size()) == kSlotsPerBatch)
    work.push_back(ExpertWork{&mlp, {}, {}});
  work.back().tokens.push_back(token);
  work.back().gates.push_back(gate);
}

void add_routed_expert_work(std::vector<ExpertWork>& work, const MoeWeights& w, const Routing& r, int64_t n, int64_t E, int64_t K) {
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(E));  // indices into r.experts
  for (int64_t i = 0; i < n * K; ++i) slots[size_t(r.experts[size_t(i)])].push_back(i);
  for (int64_t j = 0; j < int64_t(w.experts.size()); ++j)
    for (int64_t s : slots[size_t(w.first_expert + j)]) add_expert_work(work, w.experts[size_t(j)], s / K, r.weights[size_t(s)]);
}

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

}  // namespace kimi::moe_detail
