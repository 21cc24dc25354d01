#include "model/moe_data_parallel.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>

#include "common/error.h"
#include "model/expert_work.h"

namespace kimi {

namespace {

using moe_detail::ExpertWork;

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <class T>
std::span<std::byte> writable_bytes_of(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

// One all-to-all of rows of `width` floats: `out` holds rows_out[q] rows for each rank q, in rank
// order; returns the rows_in[q] rows from each rank q, in rank order.
std::vector<float> exchange_rows(Communicator& group, const std::vector<float>& out, const std::vector<int64_t>& rows_out,
                                 const std::vector<int64_t>& rows_in, int64_t width) {
  std::vector<int64_t> send(rows_out.size()), recv(rows_in.size());
  int64_t total = 0;
  for (size_t q = 0; q < rows_out.size(); ++q) send[q] = rows_out[q] * width * 4;
  for (size_t q = 0; q < rows_in.size(); ++q) {
    recv[q] = rows_in[q] * width * 4;
    total += rows_in[q];
  }
  std::vector<float> in(static_cast<size_t>(total * width));
  group.all_to_all(bytes_of(out), send, writable_bytes_of(in), recv);
  return in;
}

// The ranks the routed experts are spread over, in world-rank order: rank q is TP rank q % tp of
// replica q / tp.
struct MoeRanks {
  Communicator& all;
  Communicator* tp_group;  // this replica's TP group (null with tp 1)
  int size, me, tp, replica, tp_rank;
  explicit MoeRanks(const MoeWeights& w)
      : all(*w.routed_reduce.group),
        tp_group(w.reduce.group),
        size(all.size()),
        me(all.rank()),
        tp(size / w.data_parallel->size()),
        replica(w.data_parallel->rank()),
        tp_rank(me % tp) {
    if (tp * w.data_parallel->size() != size || me / tp != replica || (tp > 1) != (tp_group && tp_group->size() > 1) ||
        (tp_group && tp_group->rank() != tp_rank))
      throw Error("internal: the MoE group is not the data-parallel replicas' TP groups in order");
  }
};

// After each TP rank of a replica has the final rows rows_of(t) of the replica's n (its share),
// every TP rank gets all of them: each sends its share to the others (one all-to-all in the TP
// group), so a replica's rows cross the network between replicas once, not once per TP rank.
template <class RowsOf>
void share_within_replica(const MoeRanks& m, int64_t D, RowsOf rows_of, std::vector<float>& rows) {
  if (m.tp == 1) return;
  std::vector<int64_t> send(size_t(m.tp), 0), recv(size_t(m.tp), 0);
  std::vector<float> out;
  const std::vector<int64_t> mine = rows_of(m.tp_rank);
  for (int t = 0; t < m.tp; ++t) {
    if (t == m.tp_rank) continue;
    for (int64_t i : mine) out.insert(out.end(), rows.data() + i * D, rows.data() + (i + 1) * D);
    send[size_t(t)] = int64_t(mine.size());
    recv[size_t(t)] = int64_t(rows_of(t).size());
  }
  const std::vector<float> in = exchange_rows(*m.tp_group, out, send, recv, D);
  const float* y = in.data();
  for (int t = 0; t < m.tp; ++t) {
    if (t == m.tp_rank) continue;
    for (int64_t i : rows_of(t)) {
      std::copy(y, y + D, rows.data() + i * D);
      y += D;
    }
  }
}

// Naive and AllGatherReduceScatter: every replica's tokens gathered over the DP group, this
// rank's experts run on all of them; returns this replica's rows of the routed sum over all ranks.
std::vector<float> routed_gathered(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n,
                                   ThreadPool& pool, MoeTiming timing) {
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok, D = c.hidden_size;
  Communicator& dp = *w.data_parallel;
  const int replicas = dp.size();
  std::vector<int64_t> counts(size_t(replicas), 0);
  dp.all_gather(std::as_bytes(std::span<const int64_t>(&n, 1)), writable_bytes_of(counts));
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<float> mine(size_t(n * D), 0.0f);
  if (most == 0) return mine;  // no replica has tokens: nothing to exchange (every rank sees the same counts)

  // Gather: each replica's rows padded to the largest count, then compacted.
  std::vector<float> padded_mine(size_t(most * D), 0.0f), padded(size_t(replicas * most * D));
  if (n > 0) std::memcpy(padded_mine.data(), x, size_t(n * D) * 4);
  dp.all_gather(bytes_of(padded_mine), writable_bytes_of(padded));
  std::vector<int64_t> first(size_t(replicas) + 1, 0);
  std::vector<float> xs;
  xs.reserve(size_t(replicas * most * D));
  for (int r = 0; r < replicas; ++r) {
    const float* rows = padded.data() + r * most * D;
    xs.insert(xs.end(), rows, rows + counts[size_t(r)] * D);
    first[size_t(r) + 1] = first[size_t(r)] + counts[size_t(r)];
  }
  const int64_t total = first.back();

  std::optional<PhaseScope> router_scope(std::in_place, timing.times, timing.layer, Phase::Router);
  std::vector<float> logits(static_cast<size_t>(total * E));
  matmul(pool, w.router, xs.data(), total, logits.data());
  const Routing r = route_tokens(c, logits.data(), total, w.correction_bias);
  router_scope.reset();
  std::vector<ExpertWork> routed;
  moe_detail::add_routed_expert_work(routed, w, r, total, E, K);
  std::vector<float> ys(size_t(total * D), 0.0f);
  const auto never_shared = [](const MlpWeights*) { return false; };
  moe_detail::run_expert_work(routed, xs.data(), D, pool, ys.data(), never_shared, timing);

  const MoeRanks m(w);
  const float* own = ys.data() + first[size_t(m.replica)] * D;
  if (w.exchange == MoeExchange::Naive) {
    w.routed_reduce(ys.data(), total * D);
    std::copy(own, own + n * D, mine.begin());
    return mine;
  }
  // Reduce-scatter by replica and TP rank: rank q = (replica r, TP rank t) gets from every other
  // rank its partial sums of slice t of replica r's rows and adds them to its own; then the
  // replica's TP ranks share their slices.
  const auto slice = [&](int64_t count, int t) { return std::pair{count * t / m.tp, count * (t + 1) / m.tp}; };
  const auto [mine_begin, mine_end] = slice(n, m.tp_rank);
  const int64_t my_rows = mine_end - mine_begin;
  std::vector<int64_t> send(size_t(m.size), 0), recv(size_t(m.size), 0);
  std::vector<float> out_buf;
  for (int q = 0; q < m.size; ++q) {
    if (q == m.me) continue;
    const int rq = q / m.tp;
    const auto [b, e] = slice(counts[size_t(rq)], q % m.tp);
    out_buf.insert(out_buf.end(), ys.data() + (first[size_t(rq)] + b) * D, ys.data() + (first[size_t(rq)] + e) * D);
    send[size_t(q)] = e - b;
    recv[size_t(q)] = my_rows;
  }
  const std::vector<float> in_buf = exchange_rows(m.all, out_buf, send, recv, D);
  std::copy(own + mine_begin * D, own + mine_end * D, mine.begin() + mine_begin * D);
  for (int q = 0, piece = 0; q < m.size; ++q) {
    if (q == m.me) continue;
    const float* y = in_buf.data() + piece++ * my_rows * D;
    float* o = mine.data() + mine_begin * D;
    for (int64_t i = 0; i < my_rows * D; ++i) o[i] += y[i];
  }
  share_within_replica(m, D, [&](int t) {
    const auto [b, e] = slice(n, t);
    std::vector<int64_t> rows;
    for (int64_t i = b; i < e; ++i) rows.push_back(i);
    return rows;
  }, mine);
  return mine;
}

// AllToAll: this replica's tokens go only to the ranks holding one of their experts. Token i of
// the replica is dispatched by its TP rank i % tp; its row carries the hidden state, then per
// selected expert the gate (0 when the destination does not hold it) and the expert's index. The
// weighted sums come back to the dispatching rank, and the replica's TP ranks then share them.
std::vector<float> routed_all_to_all(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n,
                                     ThreadPool& pool, MoeTiming timing) {
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok, D = c.hidden_size, row = D + 2 * K;
  const MoeRanks m(w);
  // Whole experts per rank under expert parallelism; sliced, every rank holds part of each.
  const int64_t held = int64_t(w.experts.size());
  const bool whole = held < E;
  const auto holds = [&](int q, int32_t e) { return !whole || e / held == q; };
  const auto rows_of = [&](int t) {
    std::vector<int64_t> rows;
    for (int64_t i = t; i < n; i += m.tp) rows.push_back(i);
    return rows;
  };

  // Route this rank's share of the tokens.
  const std::vector<int64_t> mine = rows_of(m.tp_rank);
  const int64_t own = int64_t(mine.size());
  std::vector<float> xs_own(size_t(own * D));
  for (int64_t j = 0; j < own; ++j) std::copy(x + mine[size_t(j)] * D, x + (mine[size_t(j)] + 1) * D, xs_own.data() + j * D);
  std::optional<PhaseScope> router_scope(std::in_place, timing.times, timing.layer, Phase::Router);
  std::vector<float> logits(static_cast<size_t>(own * E));
  if (own > 0) matmul(pool, w.router, xs_own.data(), own, logits.data());
  const Routing r = route_tokens(c, logits.data(), own, w.correction_bias);
  router_scope.reset();

  // sent[q]: the indices j (into mine) of the tokens this rank sends to rank q.
  std::vector<std::vector<int64_t>> sent(size_t(m.size));
  for (int64_t j = 0; j < own; ++j)
    for (int q = 0; q < m.size; ++q)
      for (int64_t k = 0; k < K; ++k)
        if (holds(q, r.experts[size_t(j * K + k)])) {
          sent[size_t(q)].push_back(j);
          break;
        }

  // Dispatch: the counts, then the rows.
  std::vector<int64_t> send_count(size_t(m.size)), recv_count(size_t(m.size));
  std::vector<float> out_rows;
  for (int q = 0; q < m.size; ++q) {
    send_count[size_t(q)] = int64_t(sent[size_t(q)].size());
    for (int64_t j : sent[size_t(q)]) {
      out_rows.insert(out_rows.end(), xs_own.data() + j * D, xs_own.data() + (j + 1) * D);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = r.experts[size_t(j * K + k)];
        out_rows.push_back(holds(q, e) ? r.weights[size_t(j * K + k)] : 0.0f);
      }
      for (int64_t k = 0; k < K; ++k) out_rows.push_back(float(r.experts[size_t(j * K + k)]));  // exact below 2^24
    }
  }
  const std::vector<int64_t> eight(size_t(m.size), int64_t(sizeof(int64_t)));
  m.all.all_to_all(bytes_of(send_count), eight, writable_bytes_of(recv_count), eight);
  const std::vector<float> in_rows = exchange_rows(m.all, out_rows, send_count, recv_count, row);
  const int64_t received = int64_t(in_rows.size()) / row;

  // This rank's experts on the rows it received, grouped by expert.
  std::vector<float> xs(size_t(received * D));
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(held));
  for (int64_t j = 0; j < received; ++j) {
    const float* in = in_rows.data() + j * row;
    std::copy(in, in + D, xs.data() + j * D);
    for (int64_t k = 0; k < K; ++k) {
      const float gate = in[D + k];
      const int64_t e = int64_t(in[D + K + k]) - w.first_expert;
      if (gate == 0.0f) continue;
      if (e < 0 || e >= held) throw Error("internal: a token sent to a rank without its expert");
      by_expert[size_t(e)].push_back({j, gate});
    }
  }
  std::vector<ExpertWork> work;
  for (int64_t e = 0; e < held; ++e)
    for (const auto& [j, gate] : by_expert[size_t(e)]) moe_detail::add_expert_work(work, w.experts[size_t(e)], j, gate);
  std::vector<float> ys(size_t(received * D), 0.0f);
  moe_detail::run_expert_work(work, xs.data(), D, pool, ys.data(), [](const MlpWeights*) { return false; }, timing);

  // Combine: each source's results go back to it, in the order its rows came.
  const std::vector<float> results = exchange_rows(m.all, ys, recv_count, send_count, D);
  std::vector<float> sum(size_t(n * D), 0.0f);
  const float* y = results.data();
  for (int q = 0; q < m.size; ++q)
    for (int64_t j : sent[size_t(q)]) {
      float* o = sum.data() + mine[size_t(j)] * D;
      for (int64_t d = 0; d < D; ++d) o[d] += y[d];
      y += D;
    }
  share_within_replica(m, D, rows_of, sum);
  return sum;
}

}  // namespace

void moe_forward_data_parallel(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, ThreadPool& pool,
                               float* out, MoeTiming timing) {
  const int64_t D = c.hidden_size;
  const std::vector<float> routed = w.exchange == MoeExchange::AllToAll ? routed_all_to_all(c, w, x, n, pool, timing)
                                                                        : routed_gathered(c, w, x, n, pool, timing);
  if (n == 0) return;
  std::fill(out, out + n * D, 0.0f);
  if (w.shared) {
    std::vector<ExpertWork> shared;
    for (int64_t t = 0; t < n; ++t) moe_detail::add_expert_work(shared, *w.shared, t, 1.0f);
    moe_detail::run_expert_work(shared, x, D, pool, out, [](const MlpWeights*) { return true; }, timing);
    w.reduce(out, n * D);
  }
  for (int64_t i = 0; i < n * D; ++i) out[i] += routed[size_t(i)];
}

}  // namespace kimi
