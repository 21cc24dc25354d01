#pragma once
// `kimi bench latency`: one sequence through the engine (the serving path), prefill of input_len
// random tokens then output_len greedy decode steps, timed separately. Each figure is also given as a fraction of a limit measured in
// the same run: decode against memory read bandwidth (bytes of active weights + KV read per
// token), prefill against the peak of the matmul kernel.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "spec/spec_config.h"

namespace kimi {

struct LatencyOptions {
  int64_t input_len = 128;
  int64_t output_len = 64;
  int iterations = 3;  // best of
  // Untimed iterations first (vLLM's --num-iters-warmup): a process's first prefill and decode
  // fault in its KV cache and step buffers, which a serving process did long before (k25-int4 at
  // 1024 tokens, --num-iters 1: prefill at 76.3 % of the matmul peak without, 86.2 % with one).
  int warmup_iterations = 1;
  uint64_t seed = 0;
  bool measure_limits = true;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Float32;
  std::vector<int32_t> prompt;  // a text's ids (prompts are input_len slices of it); empty: random ids
  int64_t num_prompts = 1;      // each iteration runs this many prompts one after the other (means reported)
};

// A speculative variant's own figures: the drafts of its best iteration, and the times of the
// steps it is made of, each measured at the prompt's context right after the step decoding runs
// before it (the caches as decoding leaves them), from which its decode speed is predicted (so
// that what the engine adds around them shows as the gap to the measured speed).
struct SpeculativeFigures {
  int64_t k = 0;                          // num_speculative_tokens
  int64_t drafts = 0, draft_tokens = 0, accepted = 0;  // over all the prompts of the best iteration
  double acceptance_length = 0;           // 1 + accepted / drafts
  double plain_step_seconds = 0;          // target forward of 1 token
  double verify_step_seconds = 0;         // target forward of k + 1 tokens
  double draft_step_seconds = 0;          // the proposer drafting one token for one sequence
  double chain_step_seconds = 0;          // each further draft of the same call (k > 1)
  // The proposer's first call of a step after k + 1 positions were verified: it takes in all of
  // them (a draft model writes their KV) and drafts one token. After a step with a accepted drafts
  // it takes in a + 1; the prediction interpolates between this and draft_step_seconds.
  double catch_up_step_seconds = 0;
  // steps with drafts x (verify + the catch-up at the mean acceptance + k - 1 chain steps)
  // + the rest x (plain + draft)
  double predicted_decode_seconds = 0;
};

struct LatencyResult {
  double prefill_seconds = 0, decode_seconds = 0;  // best iteration
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  double decode_bytes_per_token = 0;   // weights + mean KV read
  double kv_bytes_per_token = 0;       // cached bytes per token (all layers) in the variant's KV dtype
  double prefill_flops_per_token = 0;  // 2 x active parameters, lm_head once per prompt (matmuls only)
  double read_bandwidth = 0;           // bytes/s, measured
  double matmul_peak_flops = 0;        // FLOP/s, measured
  double first_read_rate = 0;          // bytes/s of the untimed first read of every weight (read_weights_once)
  double decode_roofline_fraction = 0;
  double prefill_roofline_fraction = 0;
  int64_t generations = 0;  // prompts generated through the engine, warm-up iterations included
  SpeculativeFigures speculative;        // with a --speculative-config variant
};

// Every weight matrix's bytes read once, untimed; returns the rate (bytes/s). The latency runs do
// this first: a serving process has touched all of its weights, while a fresh one meets each
// mapped page for the first time in whichever step routes to it, and on some virtual machines
// that first touch costs far more than the read (this PVM guest: a decode step's worth of
// never-read experts read at ~20 GB/s in a fresh process, ~50 once read). Without it
// --breakdown's load-only read of the experts measured those first touches: 6.6-18 GB/s against
// 23.6-24.8 with it, k25-int4, alternated
// (bench/results/2026-12-07-avx2-prefill-tile-and-int4-decode-overlap.md).
double read_weights_once(Model& model);

LatencyResult run_latency_bench(Model& model, const LatencyOptions& options);

// The decode steps of `batch` sequences (each prefilled first, then `step_tokens` tokens each per
// forward step, output_len steps, greedy) with the model's phase timer attached
// (model/phase_times.h): time per step by layer and phase, with the bytes each phase reads per
// step. step_tokens k + 1 is the shape of a speculative verification step of k drafts (logits for
// every token); its tokens are the target's own greedy predictions, so routing sees text-like input.
struct DecodeBreakdown {
  int64_t batch = 1;            // sequences
  int64_t step_tokens = 1;      // tokens per sequence in each step
  double tokens_per_step = 0, logit_rows_per_step = 0;  // as the model counted them
  int64_t steps = 0;            // decode forward steps timed
  double step_seconds = 0;      // mean forward() time of a step
  double mean_context = 0;      // mean KV rows each step's attention reads
  std::vector<std::array<double, kNumPhases>> seconds;  // per step: [layer][phase], last row lm_head
  std::vector<std::array<double, kNumPhases>> bytes;    // per step, the same rows: weights (+ KV for attention)
  double other_seconds = 0;     // per step: step_seconds minus every named phase (norms, residual, embedding)
  // Per step, the same rows and the rest: the part outside the pool's parallel regions.
  std::vector<std::array<double, kNumPhases>> serial_seconds;
  double other_serial_seconds = 0;
  // The threads' time over the steps (threads x step time), split: waiting for each other inside
  // parallel regions (waking up, uneven ends), and idle while one thread works alone between them.
  int threads = 1;
  double regions_per_step = 0;
  double sync_share = 0;
  double serial_share = 0;
  // What the weights' own memory allows: per row, the rate (bytes/s) of a load-only read
  // (measure_read_rate) of the weights that phase reads in a step, the phases in the step's order,
  // each timed alone, over min(steps, kLoadRounds) rounds; the routed experts as many as a step
  // selects, other ones picked at random each round (0 where a row reads no weights). Against the
  // bandwidth of a fresh buffer it shows what the memory holding the weights costs (page-cache
  // pages, scattered experts); a phase's rate against it, what the kernels leave on the table.
  std::vector<std::array<double, kNumPhases>> load_rates;
};
// Rounds of DecodeBreakdown::load_rates at most (a round reads a step's weights once).
inline constexpr int64_t kLoadRounds = 8;
DecodeBreakdown measure_decode_breakdown(Model& model, const LatencyOptions& options, int64_t batch = 1,
                                         int64_t step_tokens = 1);

// The real Kimi-K2.5's depth, that a breakdown is extrapolated to.
inline constexpr int64_t kKimiK25Layers = 61, kKimiK25DenseLayers = 1;

// Whole-model decode extrapolated from a breakdown: the dense layers' times (layer 0's) and the
// MoE layers' (their mean) times the real model's counts, plus lm_head and the other time per
// layer; per token (a step's figures divided by its batch). Decode steps only (step_tokens 1).
struct DecodeExtrapolation {
  bool possible = false;  // needs a dense and an MoE layer in the measured model
  double seconds_per_token = 0, bytes_per_token = 0;
  double tokens_per_s = 0;           // 1 / seconds_per_token
  double roofline_tokens_per_s = 0;  // read_bandwidth / bytes_per_token
  // Each phase's bytes at its weights' load-only rate (DecodeBreakdown::load_rates; read_bandwidth
  // where a row has none), summed as the times are: the speed the weights' memory allows.
  double load_roofline_tokens_per_s = 0;
};
DecodeExtrapolation extrapolate_decode(const Model& model, const DecodeBreakdown& b, double read_bandwidth,
                                       int64_t layers = kKimiK25Layers, int64_t dense_layers = kKimiK25DenseLayers);
std::string format_decode_breakdown(const Model& model, const DecodeBreakdown& b, double read_bandwidth);
std::string format_latency_report(const Model& model, const LatencyOptions& options, const LatencyResult& r);

// The same bench over several loadings of one checkpoint (e.g. --quantization none,int4,w4a8)
// and/or KV cache dtypes (--kv-cache-dtype float32,bfloat16,fp8): iterations alternate between
// the variants so that machine noise hits them alike, and the limits are measured once. Ratios
// in the table are against the first variant. Speculative variants (--speculative-config) add
// their acceptance length and step times, and the decode speed those predict.
struct LatencyVariant {
  std::string label;
  Model* model = nullptr;
  LatencyResult result;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Float32;
  spec::SpeculativeConfig speculative;  // disabled: plain decoding
};
void run_latency_comparison(std::vector<LatencyVariant>& variants, const LatencyOptions& options);
std::string format_latency_comparison(const std::vector<LatencyVariant>& variants, const LatencyOptions& options);

}  // namespace kimi
