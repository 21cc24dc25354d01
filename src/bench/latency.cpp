#include "bench/latency.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/rng.h"
#include "engine/generation.h"
#include "bench/speculative_steps.h"
#include "kernels/bandwidth.h"
#include "kernels/cpu_features.h"

namespace kimi {

namespace {

// The prompts: input_len-token slices of the given text spread over it, or ordinary (non-special)
// random ids (the top 256 of the vocabulary are the special block), one seed per prompt.
std::vector<std::vector<int32_t>> bench_prompts(const ModelConfig& c, const LatencyOptions& o) {
  if (o.num_prompts < 1) throw Error("bench latency: --num-prompts must be positive");
  std::vector<std::vector<int32_t>> out;
  if (!o.prompt.empty()) {
    const int64_t n = int64_t(o.prompt.size());
    if (n < o.input_len)
      throw Error("bench latency: the prompt has " + std::to_string(n) + " tokens, fewer than --input-len");
    for (int64_t i = 0; i < o.num_prompts; ++i) {
      const int64_t at = (n - o.input_len) * i / o.num_prompts;
      out.emplace_back(o.prompt.begin() + at, o.prompt.begin() + at + o.input_len);
    }
    return out;
  }
  const int64_t ordinary = std::max<int64_t>(1, c.vocab_size - 256);
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    Rng rng(o.seed + uint64_t(i));
    std::vector<int32_t> prompt(static_cast<size_t>(o.input_len));
    for (auto& t : prompt) t = int32_t(rng.next_u64() % uint64_t(ordinary));
    out.push_back(std::move(prompt));
  }
  return out;
}

std::vector<int32_t> random_prompt(const ModelConfig& c, const LatencyOptions& o) {
  LatencyOptions one = o;
  one.num_prompts = 1;
  return bench_prompts(c, one)[0];
}

// One timed iteration: each prompt's prefill + greedy decode through the engine (the path `kimi
// generate` and the server take), one after the other; keeps the best iteration's mean times
// per prompt in r. The prefill step yields the first token, then output_len decode steps follow.
void time_once(Model& model, const std::vector<std::vector<int32_t>>& prompts, const LatencyOptions& o,
               KvCacheDtype kv_dtype, LatencyResult& r, const spec::SpeculativeConfig& speculative = {}) {
  EngineConfig config = single_sequence_config(o.input_len + o.output_len + 1, /*enable_prefix_caching=*/false);
  config.kv_cache_dtype = kv_dtype;
  config.speculative = speculative;
  Engine engine(model, nullptr, config);
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = o.output_len + 1;
  double prefill = 0, decode = 0;
  SpeculativeFigures f;
  for (const std::vector<int32_t>& prompt : prompts) {
    const GenerationStats st = generate_stream(engine, prompt, p, [](int32_t) { return true; });
    if (st.generated != o.output_len + 1)
      throw Error("bench latency: the engine generated " + std::to_string(st.generated) + " tokens");
    prefill += st.prefill_seconds;
    decode += st.decode_seconds;
    f.drafts += st.spec_drafts;
    f.draft_tokens += st.spec_draft_tokens;
    f.accepted += st.spec_accepted_tokens;
    ++r.generations;
  }
  const double n = double(prompts.size());
  r.prefill_seconds = std::min(r.prefill_seconds, prefill / n);
  if (decode / n < r.decode_seconds) {
    r.decode_seconds = decode / n;
    f.k = speculative.num_speculative_tokens;
    f.acceptance_length = f.drafts ? 1.0 + double(f.accepted) / double(f.drafts) : 0.0;
    r.speculative = f;
  }
}

void finish(const Model& model, const LatencyOptions& o, KvCacheDtype kv_dtype, LatencyResult& r) {
  const ModelConfig& c = model.config();
  r.prefill_tokens_per_s = double(o.input_len) / r.prefill_seconds;
  r.decode_tokens_per_s = double(o.output_len) / r.decode_seconds;
  // Decode reads every active weight once and the cache rows of every layer at each step.
  const double mean_ctx = double(o.input_len) + double(o.output_len + 1) / 2.0;
  r.kv_bytes_per_token = double(KvStorage::bytes_per_token(c, kv_dtype));
  r.decode_bytes_per_token = double(model.weights().active_bytes_per_token) + mean_ctx * r.kv_bytes_per_token;
  // A prefill runs every active matrix on every prompt token except lm_head, which only the last
  // token's logits need (counting it per token overstated prefill on the real shapes ~1.7x: its
  // 1.2 G parameters are more than half of a 2-layer model's active ones).
  const double head = double(model.weights().lm_head.rows) * double(model.weights().lm_head.cols);
  r.prefill_flops_per_token =
      2.0 * (double(model.weights().active_params_per_token) - head) + 2.0 * head / double(o.input_len);
  if (r.read_bandwidth > 0) r.decode_roofline_fraction = r.decode_bytes_per_token * r.decode_tokens_per_s / r.read_bandwidth;
  if (r.matmul_peak_flops > 0)
    r.prefill_roofline_fraction = r.prefill_flops_per_token * r.prefill_tokens_per_s / r.matmul_peak_flops;
}

void check_options(const LatencyOptions& o) {
  if (o.input_len < 1 || o.output_len < 1 || o.iterations < 1)
    throw Error("bench latency: --input-len, --output-len and --num-iters must be positive");
  if (o.warmup_iterations < 0) throw Error("bench latency: --num-iters-warmup must not be negative");
}

// The warm-up iterations of one variant: run as the timed ones, their times dropped.
void warm_up(Model& model, const std::vector<std::vector<int32_t>>& prompts, const LatencyOptions& o,
             KvCacheDtype kv_dtype, LatencyResult& r, const spec::SpeculativeConfig& speculative = {}) {
  LatencyResult untimed;
  untimed.prefill_seconds = untimed.decode_seconds = 1e30;
  time_once(model, prompts, o, kv_dtype, untimed, speculative);
  r.generations += untimed.generations;
}

// The attention's weight matrices (those a checkpoint lacks are empty).
std::array<const WeightMatrix*, 6> attention_matrices(const AttentionWeights& a) {
  return {&a.q_a, &a.q_b, &a.q_proj, &a.kv_a, &a.kv_b, &a.o};
}

// Appends the bytes w's kernels read (weights, scales, zero points) to a load-only pass.
void add_storage(ReadPass& pass, const WeightMatrix& w) {
  for (const std::span<const std::byte> s : w.storage())
    if (!s.empty()) pass.push_back(s);
}

void add_mlp_storage(ReadPass& pass, const MlpWeights& m) {
  for (const WeightMatrix* w : {&m.gate, &m.up, &m.down}) add_storage(pass, *w);
}

}  // namespace

double read_weights_once(Model& model) {
  ReadPass pass;
  const ModelWeights& mw = model.weights();
  add_storage(pass, mw.embed);
  for (const LayerWeights& L : mw.layers) {
    for (const WeightMatrix* w : attention_matrices(L.attn)) add_storage(pass, *w);
    if (L.dense) add_mlp_storage(pass, *L.dense);
    if (L.moe) {
      add_storage(pass, L.moe->router);
      for (const MlpWeights& e : L.moe->experts) add_mlp_storage(pass, e);
      if (L.moe->shared) add_mlp_storage(pass, *L.moe->shared);
    }
  }
  if (mw.lm_head.data != mw.embed.data) add_storage(pass, mw.lm_head);  // tied: read once
  return measure_read_rate(model.pool(), {pass});
}

LatencyResult run_latency_bench(Model& model, const LatencyOptions& o) {
  check_options(o);
  const std::vector<std::vector<int32_t>> prompts = bench_prompts(model.config(), o);
  LatencyResult r;
  r.first_read_rate = read_weights_once(model);
  r.prefill_seconds = r.decode_seconds = 1e30;
  for (int it = 0; it < o.warmup_iterations; ++it) warm_up(model, prompts, o, o.kv_cache_dtype, r);
  for (int it = 0; it < o.iterations; ++it) time_once(model, prompts, o, o.kv_cache_dtype, r);
  if (o.measure_limits) {
    r.read_bandwidth = measure_read_bandwidth(model.pool());
    r.matmul_peak_flops = measure_matmul_flops(model.pool(), model.bf16_activations());
  }
  finish(model, o, o.kv_cache_dtype, r);
  return r;
}

namespace {

// The first variant whose model runs on bf16 (or f32) activations, or null: which matmul peaks a
// comparison measures and prints.
const LatencyVariant* first_with_activations(const std::vector<LatencyVariant>& variants, bool bf16) {
  for (const LatencyVariant& v : variants)
    if (v.model->bf16_activations() == bf16) return &v;
  return nullptr;
}

}  // namespace

void run_latency_comparison(std::vector<LatencyVariant>& variants, const LatencyOptions& o) {
  check_options(o);
  if (variants.empty()) return;
  const std::vector<std::vector<int32_t>> prompts = bench_prompts(variants[0].model->config(), o);
  for (size_t i = 0; i < variants.size(); ++i) {
    LatencyVariant& v = variants[i];
    // Variants of one model (KV dtypes, speculative configs) share its one read.
    const auto same = std::find_if(variants.begin(), variants.begin() + std::ptrdiff_t(i),
                                   [&](const LatencyVariant& u) { return u.model == v.model; });
    v.result.first_read_rate = same != variants.begin() + std::ptrdiff_t(i) ? same->result.first_read_rate
                                                                             : read_weights_once(*v.model);
    v.result.prefill_seconds = v.result.decode_seconds = 1e30;
  }
  for (int it = 0; it < o.warmup_iterations; ++it)
    for (LatencyVariant& v : variants) warm_up(*v.model, prompts, o, v.kv_cache_dtype, v.result, v.speculative);
  for (int it = 0; it < o.iterations; ++it)
    for (LatencyVariant& v : variants) time_once(*v.model, prompts, o, v.kv_cache_dtype, v.result, v.speculative);
  for (LatencyVariant& v : variants)
    if (v.speculative.enabled()) measure_speculative_steps(*v.model, v.speculative, prompts[0], o, v.result);
  // The bandwidth once; the matmul peak once for each kind of activations the variants use.
  double bw = 0, peak[2] = {0, 0};
  if (o.measure_limits) {
    bw = measure_read_bandwidth(variants[0].model->pool());
    for (const bool bf16 : {false, true})
      if (first_with_activations(variants, bf16)) peak[bf16] = measure_matmul_flops(variants[0].model->pool(), bf16);
  }
  for (LatencyVariant& v : variants) {
    v.result.read_bandwidth = bw;
    v.result.matmul_peak_flops = peak[v.model->bf16_activations()];
    finish(*v.model, o, v.kv_cache_dtype, v.result);
  }
}

std::string format_latency_comparison(const std::vector<LatencyVariant>& variants, const LatencyOptions& o) {
  if (variants.empty()) return "";
  std::string out;
  char line[512];
  const LatencyResult& base = variants[0].result;
  int w = 16;  // the label column, as wide as the longest label
  for (const LatencyVariant& v : variants) w = std::max(w, int(v.label.size()));
  // The matmul peak of each kind of activations in use (variants of one kind share one figure).
  std::string peaks;
  for (const bool bf16 : {false, true}) {
    const LatencyVariant* it = first_with_activations(variants, bf16);
    if (!it) continue;
    std::snprintf(line, sizeof line, "%s%.2f GFLOP/s (%s activations)", peaks.empty() ? "" : ", ",
                  it->result.matmul_peak_flops / 1e9, bf16 ? "bf16" : "f32");
    peaks += line;
  }
  std::snprintf(line, sizeof line,
                "threads: %d, input %lld tokens, output %lld tokens, best of %d after %d untimed "
                "(variants interleaved)\n"
                "kernels: %s\n"
                "measured read bandwidth %.2f GB/s, matmul peak %s; weights read once before timing "
                "(%.2f GB/s, the first variant's)\n\n"
                "%-*s %10s %8s %10s %8s %12s %8s %10s %12s %8s %10s\n",
                variants[0].model->num_threads(), (long long)o.input_len, (long long)o.output_len, o.iterations,
                o.warmup_iterations,
                kernel_isa_summary().c_str(), base.read_bandwidth / 1e9, peaks.c_str(), base.first_read_rate / 1e9, w,
                "variant", "MB/token", "fewer", "KV B/token", "KV", "decode tok/s", "ratio", "roofline", "prefill tok/s",
                "ratio", "roofline");
  out += line;
  for (const LatencyVariant& v : variants) {
    const LatencyResult& r = v.result;
    const double mb = double(v.model->weights().active_bytes_per_token) / 1e6;
    const double base_mb = double(variants[0].model->weights().active_bytes_per_token) / 1e6;
    std::snprintf(line, sizeof line, "%-*s %10.1f %7.2fx %10.0f %7.3fx %12.1f %7.2fx %9.1f%% %12.1f %7.2fx %9.1f%%\n",
                  w, v.label.c_str(), mb, base_mb / mb, r.kv_bytes_per_token, r.kv_bytes_per_token / base.kv_bytes_per_token,
                  r.decode_tokens_per_s,
                  r.decode_tokens_per_s / base.decode_tokens_per_s, 100.0 * r.decode_roofline_fraction,
                  r.prefill_tokens_per_s, r.prefill_tokens_per_s / base.prefill_tokens_per_s,
                  100.0 * r.prefill_roofline_fraction);
    out += line;
  }
  for (const LatencyVariant& v : variants)
    out += v.label + ": " + v.model->weights().storage + ", KV cache " +
           std::string(kv_cache_dtype_name(v.kv_cache_dtype)) + "\n";
  if (std::any_of(variants.begin(), variants.end(), [](const LatencyVariant& v) { return v.speculative.enabled(); })) {
    out += "\nspeculative decoding (step times: medians, each after the step decoding runs before it, at the\n"
           "prompt's context)\n";
    std::snprintf(line, sizeof line, "%-*s %3s %7s %9s %10s %9s %10s %9s %9s %9s %12s %10s %7s %7s %9s\n", w, "variant",
                  "k", "drafts", "accepted", "accept len", "plain ms", "verify ms", "draft ms", "catch-up", "chain ms",
                  "predicted/s", "decode/s", "pred x", "meas x", "meas/pred");
    out += line;
    // The plain variant decodes through the same engine: its measured rate against its step time
    // is the engine's cost per step without speculation, which the speed-ups compare net of.
    const auto it = std::find_if(variants.begin(), variants.end(), [&](const LatencyVariant& v) {
      return !v.speculative.enabled() && v.model == variants.front().model;
    });
    const LatencyVariant* plain = it == variants.end() ? nullptr : &*it;
    for (const LatencyVariant& v : variants) {
      if (!v.speculative.enabled()) continue;
      const SpeculativeFigures& f = v.result.speculative;
      const double predicted = double(o.output_len) / f.predicted_decode_seconds;
      const double pred_x = predicted * f.plain_step_seconds;
      const double meas_x = plain ? v.result.decode_tokens_per_s / plain->result.decode_tokens_per_s : 0.0;
      std::snprintf(line, sizeof line,
                    "%-*s %3lld %7lld %9lld %10.2f %9.3f %10.3f %9.3f %9.3f %9.3f %12.1f %10.1f %6.2fx %6.2fx %8.2fx\n", w,
                    v.label.c_str(), (long long)f.k, (long long)f.drafts, (long long)f.accepted, f.acceptance_length,
                    1e3 * f.plain_step_seconds, 1e3 * f.verify_step_seconds, 1e3 * f.draft_step_seconds,
                    1e3 * f.catch_up_step_seconds, 1e3 * f.chain_step_seconds, predicted, v.result.decode_tokens_per_s,
                    pred_x, meas_x, plain ? meas_x / pred_x : 0.0);
      out += line;
    }
    out += "(accept len: 1 + accepted / drafts, tokens per verification step; plain: a target step of one\n"
           " token; verify: of k + 1 tokens, after the proposer's call; draft: the proposer drafting one\n"
           " token after a verification step; catch-up: the same taking in all k + 1 verified positions;\n"
           " chain: each further draft of a call of k; predicted: output tokens over drafts x (verify +\n"
           " first draft + (k - 1) x chain) + the steps without drafts x (plain + draft), the first draft\n"
           " interpolated as draft + accepted / (drafts x k) x (catch-up - draft);\n"
           " pred x: the speed-up the step times predict, predicted/s x plain ms; meas x: decode/s over\n"
           " plain decoding's in this run; meas/pred near 1: speculation's machinery costs nothing beyond\n"
           " the steps (the engine's own cost per step, which plain decoding pays too, cancels))\n";
  }
  out += "(MB/token: active weight bytes per decoded token; fewer: how many times fewer weight bytes a\n"
         " decoded token reads than the first variant, the speed-up a memory-bound decode can reach;\n"
         " KV B/token: bytes cached per token over all layers, KV: its ratio to the first variant;\n"
         " decode roofline: active weight bytes + KV reads per token against read bandwidth;\n"
         " prefill: 2 x active parameters per token against the float matmul peak of the variant's\n"
         " activations, so integer kernels may exceed it)\n";
  return out;
}

std::string format_latency_report(const Model& model, const LatencyOptions& o, const LatencyResult& r) {
  char buf[2048];
  const ModelConfig& c = model.config();
  std::snprintf(buf, sizeof buf,
                "model: %lld layers, hidden %lld, %lld experts (%lld active), %.1f MB of weights, "
                "%.1f MB active per token\n"
                "threads: %d, input %lld tokens, output %lld tokens, best of %d after %d untimed\n"
                "kernels: %s; %s\n"
                "KV cache: %s, %.0f bytes per token\n"
                "weights: read once before timing, at %.2f GB/s (a serving process has touched them all; a "
                "fresh one's first touches can be slow)\n"
                "prefill: %9.1f tokens/s  (%.3f s)  %7.2f GFLOP/s of a measured matmul peak of %.2f GFLOP/s "
                "(%s activations) = %.1f%% of roofline\n"
                "decode:  %9.1f tokens/s  (%.3f s)  %7.2f GB/s of a measured read bandwidth of %.2f GB/s "
                "= %.1f%% of roofline\n",
                (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.n_routed_experts,
                (long long)c.num_experts_per_tok, double(model.weights().total_bytes) / 1e6,
                double(model.weights().active_bytes_per_token) / 1e6, model.num_threads(),
                (long long)o.input_len, (long long)o.output_len, o.iterations, o.warmup_iterations,
                kernel_isa_summary().c_str(),
                activation_summary(model.activation_plan()).c_str(),
                std::string(kv_cache_dtype_name(o.kv_cache_dtype)).c_str(), r.kv_bytes_per_token, r.first_read_rate / 1e9,
                r.prefill_tokens_per_s,
                r.prefill_seconds, r.prefill_flops_per_token * r.prefill_tokens_per_s / 1e9,
                r.matmul_peak_flops / 1e9, model.bf16_activations() ? "bf16" : "f32", 100.0 * r.prefill_roofline_fraction,
                r.decode_tokens_per_s,
                r.decode_seconds, r.decode_bytes_per_token * r.decode_tokens_per_s / 1e9, r.read_bandwidth / 1e9,
                100.0 * r.decode_roofline_fraction);
  return buf;
}

}  // namespace kimi

namespace kimi {

namespace {

size_t mlp_bytes(const MlpWeights& m) { return m.gate.bytes() + m.up.bytes() + m.down.bytes(); }

size_t attention_weight_bytes(const AttentionWeights& a) {
  size_t n = 4 * (a.q_a_norm.size() + a.kv_a_norm.size());
  for (const WeightMatrix* w : attention_matrices(a)) n += w->bytes();
  return n;
}

// How many of E experts `tokens` tokens select, k each, under uniform routing: the expected size
// of the union of their picks (k for one token).
double expected_distinct_experts(double E, double k, int64_t tokens) {
  return E * (1.0 - std::pow(1.0 - k / E, double(tokens)));
}

// DecodeBreakdown::load_rates: `rounds` rounds of load-only reads of a step's weights in the
// step's order, one pass per (layer, phase), each pass timed alone; per row the bytes of its
// rounds over their time. The routed experts of a layer are as many as `tokens` tokens would pick
// under uniform routing (their expected union, rounded), other ones drawn at random each round.
std::vector<std::array<double, kNumPhases>> measure_load_rates(Model& model, const LatencyOptions& o, int64_t tokens,
                                                               int64_t rounds) {
  const ModelWeights& w = model.weights();
  const size_t rows = w.layers.size() + 1;
  std::vector<std::array<double, kNumPhases>> bytes(rows), seconds(rows), rates(rows);
  Rng rng(o.seed + 0x5eed);
  const auto time_pass = [&](size_t row, Phase p, const ReadPass& pass) {
    double n = 0;
    for (const std::span<const std::byte> s : pass) n += double(s.size());
    const double rate = n > 0 ? measure_read_rate(model.pool(), {pass}) : 0;
    if (rate <= 0) return;
    bytes[row][size_t(p)] += n;
    seconds[row][size_t(p)] += n / rate;
  };
  for (int64_t round = 0; round < rounds; ++round) {
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights& L = w.layers[l];
      ReadPass pass;
      for (const WeightMatrix* m : attention_matrices(L.attn)) add_storage(pass, *m);
      time_pass(l, Phase::Attention, pass);
      if (L.dense) {
        pass.clear();
        add_mlp_storage(pass, *L.dense);
        time_pass(l, Phase::DenseMlp, pass);
      }
      if (!L.moe) continue;
      pass.clear();
      add_storage(pass, L.moe->router);
      time_pass(l, Phase::Router, pass);
      const int64_t E = int64_t(L.moe->experts.size());
      if (E > 0) {
        const double k = double(std::min<int64_t>(model.config().num_experts_per_tok, E));
        const int64_t picks = std::clamp<int64_t>(std::llround(expected_distinct_experts(double(E), k, tokens)), 1, E);
        std::vector<int64_t> order(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) order[size_t(e)] = e;
        pass.clear();
        for (int64_t i = 0; i < picks; ++i) {
          std::swap(order[size_t(i)], order[size_t(i + int64_t(rng.next_u64() % uint64_t(E - i)))]);
          add_mlp_storage(pass, L.moe->experts[size_t(order[size_t(i)])]);
        }
        time_pass(l, Phase::RoutedExperts, pass);
      }
      if (L.moe->shared) {
        pass.clear();
        add_mlp_storage(pass, *L.moe->shared);
        time_pass(l, Phase::SharedExpert, pass);
      }
    }
    ReadPass head;
    add_storage(head, w.lm_head);
    time_pass(rows - 1, Phase::LmHead, head);
  }
  for (size_t r = 0; r < rows; ++r)
    for (int p = 0; p < kNumPhases; ++p)
      if (seconds[r][size_t(p)] > 0) rates[r][size_t(p)] = bytes[r][size_t(p)] / seconds[r][size_t(p)];
  return rates;
}

}  // namespace

DecodeBreakdown measure_decode_breakdown(Model& model, const LatencyOptions& o, int64_t batch, int64_t step_tokens) {
  check_options(o);
  if (batch < 1) throw Error("bench latency: --batch must be positive");
  if (step_tokens < 1) throw Error("bench latency: --step-tokens must be positive");
  const ModelConfig& c = model.config();
  // batch sequences, each its own random prompt and cache, prefilled one by one; then output_len
  // greedy steps of step_tokens tokens per sequence in one forward call each, timed by phase.
  std::vector<KvCache> caches;
  const size_t T = size_t(step_tokens);
  std::vector<int32_t> next(size_t(batch) * T);
  const auto argmax = [&](const float* row) {
    return int32_t(std::max_element(row, row + c.vocab_size) - row);
  };
  for (int64_t b = 0; b < batch; ++b) {
    LatencyOptions ob = o;
    ob.seed = o.seed + uint64_t(b);
    const std::vector<int32_t> prompt = random_prompt(c, ob);
    caches.emplace_back(c, o.input_len + o.output_len * step_tokens, o.kv_cache_dtype);
    std::fill_n(&next[size_t(b) * T], T, argmax(forward_sequence(model, prompt, caches.back()).data()));
  }
  PhaseTimes times;
  RegionTimes regions;
  {
    // Both timers are attached for the timed steps only, and detached however they end.
    struct Timed {
      Model& model;
      Timed(Model& m, PhaseTimes& t) : model(m) {
        model.set_phase_times(&t);
        model.pool().set_region_timing(true);
      }
      ~Timed() {
        model.set_phase_times(nullptr);
        model.pool().set_region_timing(false);
      }
    } timed(model, times);
    for (int64_t step = 0; step < o.output_len; ++step) {
      ForwardBatch fb;
      for (int64_t b = 0; b < batch; ++b)
        fb.seqs.push_back({.tokens = std::span<const int32_t>(&next[size_t(b) * T], T),
                           .kv = caches[size_t(b)].view(),
                           .num_logits = step_tokens});
      const ForwardResult r = model.forward(fb);
      for (int64_t b = 0; b < batch; ++b) {
        caches[size_t(b)].set_length(caches[size_t(b)].length() + step_tokens);
        // The last row's prediction first (what decode would feed), then the other rows' as
        // stand-in drafts.
        const float* rows = &r.logits[size_t(b) * T * size_t(c.vocab_size)];
        next[size_t(b) * T] = argmax(rows + (T - 1) * size_t(c.vocab_size));
        for (size_t t = 1; t < T; ++t) next[size_t(b) * T + t] = argmax(rows + (t - 1) * size_t(c.vocab_size));
      }
    }
    regions = model.pool().region_times();
  }

  DecodeBreakdown b;
  b.threads = model.num_threads();
  const double thread_seconds = double(b.threads) * times.forward_seconds;
  if (times.steps > 0 && thread_seconds > 0) {
    b.regions_per_step = double(regions.regions) / double(times.steps);
    b.sync_share = regions.wait_seconds(b.threads) / thread_seconds;
    b.serial_share = double(b.threads - 1) * std::max(0.0, times.forward_seconds - regions.wall_seconds) / thread_seconds;
  }
  b.batch = batch;
  b.step_tokens = step_tokens;
  b.steps = times.steps;
  b.tokens_per_step = double(times.tokens) / double(times.steps);
  b.logit_rows_per_step = double(times.logit_rows) / double(times.steps);
  b.step_seconds = times.forward_seconds / double(times.steps);
  // Token t of step i reads input_len + i * step_tokens + t + 1 rows: the mean of 1 .. steps x
  // step_tokens past the prompt.
  b.mean_context = double(o.input_len) + (double(step_tokens) * double(times.steps) + 1.0) / 2.0;
  const auto per_step = [&](std::vector<std::array<double, kNumPhases>> rows) {
    for (auto& row : rows)
      for (double& s : row) s /= double(times.steps);
    return rows;
  };
  b.seconds = per_step(times.seconds);
  b.other_seconds = b.step_seconds - times.named_total() / double(times.steps);
  b.serial_seconds = per_step(times.serial_seconds);
  b.other_serial_seconds =
      std::max(0.0, (times.forward_seconds - regions.wall_seconds - times.named_serial_total()) / double(times.steps));

  // Bytes a step of `batch` tokens reads in each phase: weights once, KV rows per sequence; the
  // routed experts are the union of the tokens' top-k, its expected size if routing were uniform.
  const ModelWeights& w = model.weights();
  const double kv_per_layer = double(KvStorage::bytes_per_token(c, o.kv_cache_dtype)) / double(c.num_hidden_layers);
  b.bytes.assign(size_t(c.num_hidden_layers + 1), {});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    auto& row = b.bytes[size_t(l)];
    row[size_t(Phase::Attention)] =
        double(attention_weight_bytes(L.attn)) + double(batch * step_tokens) * b.mean_context * kv_per_layer;
    if (L.dense) row[size_t(Phase::DenseMlp)] = double(mlp_bytes(*L.dense));
    if (L.moe) {
      row[size_t(Phase::Router)] = double(L.moe->router.bytes() + 4 * L.moe->correction_bias.size());
      size_t experts = 0;
      for (const MlpWeights& e : L.moe->experts) experts += mlp_bytes(e);
      const double E = double(L.moe->experts.size()), k = double(c.num_experts_per_tok);
      row[size_t(Phase::RoutedExperts)] = double(experts) / E * expected_distinct_experts(E, k, batch * step_tokens);
      if (L.moe->shared) row[size_t(Phase::SharedExpert)] = double(mlp_bytes(*L.moe->shared));
    }
  }
  b.bytes.back()[size_t(Phase::LmHead)] = double(w.lm_head.bytes() + 4 * w.final_norm.size());
  b.load_rates = measure_load_rates(model, o, batch * step_tokens, std::min<int64_t>(b.steps, kLoadRounds));
  return b;
}

DecodeExtrapolation extrapolate_decode(const Model& model, const DecodeBreakdown& b, double read_bandwidth,
                                       int64_t layers, int64_t dense_layers) {
  DecodeExtrapolation x;
  const int64_t L = model.config().num_hidden_layers;
  std::vector<int64_t> dense, moe;
  for (int64_t l = 0; l < L; ++l) (model.weights().layers[size_t(l)].moe ? moe : dense).push_back(l);
  if (dense.empty() || moe.empty()) return x;
  const auto layer_sum = [&](const std::vector<std::array<double, kNumPhases>>& v, const std::vector<int64_t>& ls) {
    double s = 0;
    for (int64_t l : ls)
      for (double t : v[size_t(l)]) s += t;
    return s / double(ls.size());
  };
  const double other_per_layer = b.other_seconds / double(L);
  x.possible = true;
  x.seconds_per_token = double(dense_layers) * layer_sum(b.seconds, dense) +
                        double(layers - dense_layers) * layer_sum(b.seconds, moe) +
                        layer_sum(b.seconds, {L}) + double(layers) * other_per_layer;
  x.bytes_per_token = double(dense_layers) * layer_sum(b.bytes, dense) +
                      double(layers - dense_layers) * layer_sum(b.bytes, moe) + layer_sum(b.bytes, {L});
  // Per step of b.batch tokens so far; per token from here.
  x.tokens_per_s = double(b.batch) / x.seconds_per_token;
  if (read_bandwidth > 0) x.roofline_tokens_per_s = double(b.batch) * read_bandwidth / x.bytes_per_token;
  // The same sum over each phase's bytes at the rate its weights load at (read_bandwidth where a
  // row has none); no figure when a row has neither.
  std::vector<std::array<double, kNumPhases>> load_seconds(b.bytes.size());
  bool complete = true;
  for (size_t r = 0; r < b.bytes.size(); ++r)
    for (size_t p = 0; p < size_t(kNumPhases); ++p) {
      if (b.bytes[r][p] <= 0) continue;
      const double rate = r < b.load_rates.size() && b.load_rates[r][p] > 0 ? b.load_rates[r][p] : read_bandwidth;
      if (rate > 0)
        load_seconds[r][p] = b.bytes[r][p] / rate;
      else
        complete = false;
    }
  if (complete) {
    const double s = double(dense_layers) * layer_sum(load_seconds, dense) +
                     double(layers - dense_layers) * layer_sum(load_seconds, moe) + layer_sum(load_seconds, {L});
    if (s > 0) x.load_roofline_tokens_per_s = double(b.batch) / s;
  }
  x.seconds_per_token /= double(b.batch);
  x.bytes_per_token /= double(b.batch);
  return x;
}

std::string format_decode_breakdown(const Model& model, const DecodeBreakdown& b, double read_bandwidth) {
  const ModelConfig& c = model.config();
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "\ndecode breakdown: %lld sequences x %lld token%s, %lld steps, %.3f ms per step (mean context %.0f "
                "rows), read bandwidth %.2f GB/s\n"
                "%-6s %-15s %10s %10s %9s %9s %10s %9s %10s\n",
                (long long)b.batch, (long long)b.step_tokens, b.step_tokens == 1 ? "" : "s (a verification step's shape)",
                (long long)b.steps, 1e3 * b.step_seconds, b.mean_context, read_bandwidth / 1e9, "layer", "phase", "ms", "MB",
                "GB/s", "of bw", "serial ms", "load GB/s", "of load");
  out += line;
  double named = 0;
  for (size_t l = 0; l < b.seconds.size(); ++l) {
    for (int p = 0; p < kNumPhases; ++p) {
      const double s = b.seconds[l][size_t(p)], by = b.bytes[l][size_t(p)];
      if (s == 0 && by == 0) continue;
      named += s;
      const double gbs = s > 0 ? by / s / 1e9 : 0;
      const std::string layer = l == size_t(c.num_hidden_layers) ? "head" : std::to_string(l);
      const double load = l < b.load_rates.size() ? b.load_rates[l][size_t(p)] : 0;
      std::snprintf(line, sizeof line, "%-6s %-15s %10.3f %10.2f %9.2f %8.1f%% %10.3f %9.2f %9.1f%%\n", layer.c_str(),
                    phase_name(Phase(p)), 1e3 * s, by / 1e6, gbs,
                    read_bandwidth > 0 ? 100.0 * gbs * 1e9 / read_bandwidth : 0.0, 1e3 * b.serial_seconds[l][size_t(p)],
                    load / 1e9, load > 0 ? 100.0 * gbs * 1e9 / load : 0.0);
      out += line;
    }
  }
  std::snprintf(line, sizeof line,
                "%-6s %-15s %10.3f   (norms, residual adds, embedding; %.1f%% of the step; %.3f ms serial)\n", "",
                "other", 1e3 * b.other_seconds, 100.0 * b.other_seconds / b.step_seconds, 1e3 * b.other_serial_seconds);
  out += line;
  std::snprintf(line, sizeof line, "named phases sum to %.1f%% of the step time\n", 100.0 * named / b.step_seconds);
  out += line;
  std::snprintf(line, sizeof line,
                "threads: %d, %.0f parallel regions per step; of the threads' time: %.1f%% waiting for each other "
                "inside regions (sync), %.1f%% idle while one thread works between regions (serial: the column)\n",
                b.threads, b.regions_per_step, 100.0 * b.sync_share, 100.0 * b.serial_share);
  out += line;
  // The routed experts' load-only rate over all MoE layers (bytes over the load time).
  double routed_bytes = 0, routed_seconds = 0, routed_load_seconds = 0;
  for (size_t l = 0; l < b.seconds.size() && l < b.load_rates.size(); ++l) {
    const size_t p = size_t(Phase::RoutedExperts);
    if (b.load_rates[l][p] <= 0) continue;
    routed_bytes += b.bytes[l][p];
    routed_seconds += b.seconds[l][p];
    routed_load_seconds += b.bytes[l][p] / b.load_rates[l][p];
  }
  if (routed_load_seconds > 0 && routed_seconds > 0) {
    const double load_rate = routed_bytes / routed_load_seconds;
    std::snprintf(line, sizeof line,
                  "routed experts' memory: a load-only read of a step's worth of experts (at random) %.2f GB/s, "
                  "%.1f%% of the read bandwidth; the experts' products at %.1f%% of that\n",
                  load_rate / 1e9, read_bandwidth > 0 ? 100.0 * load_rate / read_bandwidth : 0.0,
                  100.0 * routed_load_seconds / routed_seconds);
    out += line;
  }
  if (b.step_tokens != 1) return out;  // extrapolated decode speed: decode steps only
  const DecodeExtrapolation x = extrapolate_decode(model, b, read_bandwidth);
  if (!x.possible) {
    out += "(no extrapolation to the real depth: the model needs a dense and an MoE layer)\n";
    return out;
  }
  std::snprintf(line, sizeof line,
                "extrapolated to Kimi-K2.5's %lld layers (%lld dense + %lld MoE, this model's %lld routed experts, "
                "top-%lld):\n  %.1f ms and %.1f MB per token = %.2f tokens/s; roofline at %.2f GB/s: %.2f tokens/s; "
                "%.1f%% of roofline\n",
                (long long)kKimiK25Layers, (long long)kKimiK25DenseLayers, (long long)(kKimiK25Layers - kKimiK25DenseLayers),
                (long long)c.n_routed_experts, (long long)c.num_experts_per_tok, 1e3 * x.seconds_per_token,
                x.bytes_per_token / 1e6, x.tokens_per_s, read_bandwidth / 1e9, x.roofline_tokens_per_s,
                x.roofline_tokens_per_s > 0 ? 100.0 * x.tokens_per_s / x.roofline_tokens_per_s : 0.0);
  out += line;
  if (x.load_roofline_tokens_per_s > 0) {
    std::snprintf(line, sizeof line,
                  "  at the rates the weights' own memory gave a load-only read (load GB/s): %.2f tokens/s; %.1f%% of "
                  "that\n",
                  x.load_roofline_tokens_per_s, 100.0 * x.tokens_per_s / x.load_roofline_tokens_per_s);
    out += line;
  }
  return out;
}

}  // namespace kimi
