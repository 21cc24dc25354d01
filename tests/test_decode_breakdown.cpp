// The per-phase decode timer (model/phase_times.h) and bench latency's breakdown on the tiny
// model: every phase is timed where it runs, the named phases cover the step, attaching the timer
// does not change the logits, and the extrapolation to 61 layers adds up.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "bench/latency.h"
#include "model/model.h"
#include "test_util.h"

namespace kimi {
namespace {

class DecodeBreakdownTest : public test::TinyModelTest {};

double at(const PhaseTimes& t, int64_t row, Phase p) { return t.seconds[size_t(row)][size_t(p)]; }

// A short latency run that skips measuring the machine's limits (bandwidth, matmul peak).
LatencyOptions short_run(int64_t input_len, int64_t output_len, int iterations) {
  LatencyOptions o;
  o.input_len = input_len;
  o.output_len = output_len;
  o.iterations = iterations;
  o.measure_limits = false;
  return o;
}

// Routed-expert bytes expected of a step of `tokens` tokens: the expected union of their top-k
// picks under uniform routing, priced per expert from a one-token breakdown of layer 1.
double expected_routed_bytes(const Model& m, const DecodeBreakdown& one, int tokens) {
  const double E = double(m.config().n_routed_experts), k = double(m.config().num_experts_per_tok);
  return one.bytes[1][size_t(Phase::RoutedExperts)] / k * E * (1 - std::pow(1 - k / E, tokens));
}

// Decode steps after a prompt, with the timer attached: the named phases must cover nearly all of
// the forward time, which itself must be the time measured around the calls.
TEST_F(DecodeBreakdownTest, PhasesSumToTheStepTime) {
  Model& m = *model_;
  const int64_t L = m.config().num_hidden_layers;
  const std::vector<int32_t> prompt = {5, 77, 300, 12, 901, 44, 7, 1000};
  constexpr int kSteps = 40;
  KvCache cache = m.new_cache(int64_t(prompt.size()) + kSteps);
  forward_sequence(m, prompt, cache);
  PhaseTimes times;
  m.set_phase_times(&times);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kSteps; ++i) {
    const int32_t tok = int32_t(100 + i);
    forward_sequence(m, std::span<const int32_t>(&tok, 1), cache);
  }
  const double outside = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.set_phase_times(nullptr);

  EXPECT_EQ(times.steps, kSteps);
  ASSERT_EQ(times.seconds.size(), size_t(L + 1));
  // Each phase where it belongs: layer 0 dense, the others MoE, the lm_head in the last row.
  EXPECT_GT(at(times, 0, Phase::Attention), 0);
  EXPECT_GT(at(times, 0, Phase::DenseMlp), 0);
  EXPECT_EQ(at(times, 0, Phase::Router), 0);
  EXPECT_EQ(at(times, 0, Phase::RoutedExperts), 0);
  for (int64_t l = 1; l < L; ++l) {
    EXPECT_GT(at(times, l, Phase::Attention), 0) << l;
    EXPECT_GT(at(times, l, Phase::Router), 0) << l;
    EXPECT_GT(at(times, l, Phase::RoutedExperts), 0) << l;
    EXPECT_GT(at(times, l, Phase::SharedExpert), 0) << l;
    EXPECT_EQ(at(times, l, Phase::DenseMlp), 0) << l;
  }
  EXPECT_GT(at(times, L, Phase::LmHead), 0);
  EXPECT_EQ(at(times, L, Phase::Attention), 0);

  EXPECT_LE(times.forward_seconds, outside);
  EXPECT_GT(times.forward_seconds, 0.75 * outside);  // forward_sequence adds only a length update
  const double named = times.named_total();
  EXPECT_LE(named, times.forward_seconds);
  // The unnamed rest (embedding row, norms, residual adds of a 64-wide model) is a few percent in
  // Release and near a fifth under ASan, whose instrumentation slows those scalar loops the most.
  EXPECT_GT(named, 0.6 * times.forward_seconds) << "named " << named << " of " << times.forward_seconds;
  // The pool's region timing is off here, so no time is seen inside a region: all of it is serial.
  ASSERT_EQ(times.serial_seconds.size(), times.seconds.size());
  for (size_t l = 0; l < times.seconds.size(); ++l)
    for (int p = 0; p < kNumPhases; ++p) EXPECT_EQ(times.serial_seconds[l][size_t(p)], times.seconds[l][size_t(p)]);
}

// The timer only observes: the shared expert in a batch of its own sums in another order, so the
// logits may differ by float rounding, no more.
TEST_F(DecodeBreakdownTest, TimingDoesNotChangeTheLogits) {
  Model& m = *model_;
  const std::vector<int32_t> prompt = {5, 77, 300, 12, 901, 44, 7, 1000};
  KvCache a = m.new_cache(8), b = m.new_cache(8);
  const std::vector<float> plain = forward_sequence(m, prompt, a, true);
  PhaseTimes times;
  m.set_phase_times(&times);
  const std::vector<float> timed = forward_sequence(m, prompt, b, true);
  m.set_phase_times(nullptr);
  ASSERT_EQ(plain.size(), timed.size());
  for (size_t i = 0; i < plain.size(); ++i) ASSERT_NEAR(plain[i], timed[i], 1e-4f * (1 + std::abs(plain[i]))) << i;
  EXPECT_EQ(times.steps, 1);
}

TEST_F(DecodeBreakdownTest, BenchBreakdownAndExtrapolation) {
  Model& m = *model_;
  LatencyOptions o;
  o.input_len = 16;
  o.output_len = 12;
  o.measure_limits = false;
  const DecodeBreakdown b = measure_decode_breakdown(m, o);
  EXPECT_EQ(b.steps, o.output_len);  // the prefill step is not counted
  const int64_t L = m.config().num_hidden_layers;
  ASSERT_EQ(b.seconds.size(), size_t(L + 1));
  ASSERT_EQ(b.bytes.size(), size_t(L + 1));
  double named = 0;
  for (const auto& row : b.seconds)
    for (double s : row) named += s;
  EXPECT_NEAR(named + b.other_seconds, b.step_seconds, 1e-9);
  // As in PhasesSumToTheStepTime: the unnamed rest is a few percent in Release, up to a fifth under
  // ASan, more when the machine is loaded (CI saw 88 %).
  EXPECT_GT(named, 0.6 * b.step_seconds);
  // Bytes: top-k of the layer's experts, the full router, the lm_head.
  const MoeWeights& moe = *m.weights().layers[1].moe;
  const size_t expert = moe.experts[0].gate.bytes() + moe.experts[0].up.bytes() + moe.experts[0].down.bytes();
  EXPECT_DOUBLE_EQ(b.bytes[1][size_t(Phase::RoutedExperts)], double(expert) * double(m.config().num_experts_per_tok));
  EXPECT_GT(b.bytes[1][size_t(Phase::Router)], double(moe.router.bytes()) - 1);
  EXPECT_GT(b.bytes[size_t(L)][size_t(Phase::LmHead)], double(m.weights().lm_head.bytes()) - 1);
  EXPECT_GT(b.bytes[0][size_t(Phase::DenseMlp)], 0);
  // The load-only reads of each phase's weights: a rate wherever a row reads weights, none elsewhere;
  // their column and lines are checked with the report below.
  ASSERT_EQ(b.load_rates.size(), b.bytes.size());
  for (size_t l = 0; l < b.bytes.size(); ++l)
    for (int p = 0; p < kNumPhases; ++p) {
      if (b.bytes[l][size_t(p)] > 0)
        EXPECT_GT(b.load_rates[l][size_t(p)], 0) << l << " " << phase_name(Phase(p));
      else
        EXPECT_EQ(b.load_rates[l][size_t(p)], 0) << l << " " << phase_name(Phase(p));
    }

  // The extrapolation to (here) 5 layers, 1 dense: layer 0 once, the MoE layers' mean 4 times.
  const DecodeExtrapolation x = extrapolate_decode(m, b, 1e10, 5, 1);
  ASSERT_TRUE(x.possible);
  double dense = 0, moe_sum = 0;
  for (double s : b.seconds[0]) dense += s;
  for (int64_t l = 1; l < L; ++l)
    for (double s : b.seconds[size_t(l)]) moe_sum += s;
  double head = 0;
  for (double s : b.seconds[size_t(L)]) head += s;
  const double expect = dense + 4 * moe_sum / double(L - 1) + head + 5 * b.other_seconds / double(L);
  EXPECT_NEAR(x.seconds_per_token, expect, 1e-12);
  EXPECT_NEAR(x.tokens_per_s, 1 / expect, 1e-6 / expect);
  EXPECT_NEAR(x.roofline_tokens_per_s, 1e10 / x.bytes_per_token, 1e-6);
  // The load roofline: each row's bytes at its own load-only rate, summed as the times are.
  const auto load_time = [&](size_t l) {
    double t = 0;
    for (int p = 0; p < kNumPhases; ++p)
      if (b.bytes[l][size_t(p)] > 0) t += b.bytes[l][size_t(p)] / b.load_rates[l][size_t(p)];
    return t;
  };
  double moe_load = 0;
  for (int64_t l = 1; l < L; ++l) moe_load += load_time(size_t(l));
  const double load_expect = load_time(0) + 4 * moe_load / double(L - 1) + load_time(size_t(L));
  EXPECT_NEAR(x.load_roofline_tokens_per_s, 1 / load_expect, 1e-6 / load_expect);
  // The threads' time: shares of the steps' thread time, from the pool's region timing.
  EXPECT_EQ(b.threads, m.num_threads());
  if (b.threads > 1) {
    EXPECT_GT(b.regions_per_step, 0);
  }
  EXPECT_GE(b.sync_share, 0);
  EXPECT_GE(b.serial_share, 0);
  EXPECT_LT(b.sync_share + b.serial_share, 1);
  // Each phase's serial part lies within its time; they and the rest's add up to the serial share.
  ASSERT_EQ(b.serial_seconds.size(), b.seconds.size());
  double serial = b.other_serial_seconds;
  for (size_t l = 0; l < b.seconds.size(); ++l)
    for (int p = 0; p < kNumPhases; ++p) {
      EXPECT_GE(b.serial_seconds[l][size_t(p)], 0);
      EXPECT_LE(b.serial_seconds[l][size_t(p)], b.seconds[l][size_t(p)]);
      serial += b.serial_seconds[l][size_t(p)];
    }
  EXPECT_GE(b.other_serial_seconds, 0);
  EXPECT_LE(b.other_serial_seconds, b.other_seconds + 1e-9);
  if (b.threads > 1) {
    EXPECT_NEAR(serial, b.serial_share * b.step_seconds * b.threads / (b.threads - 1), 1e-3 * b.step_seconds);
    // The lm_head product (1280 x 64) is shared by the threads: its region is not serial time.
    EXPECT_LT(b.serial_seconds[size_t(L)][size_t(Phase::LmHead)], b.seconds[size_t(L)][size_t(Phase::LmHead)]);
  }
  const std::string report = format_decode_breakdown(m, b, 1e10);
  EXPECT_NE(report.find("routed experts"), std::string::npos);
  EXPECT_NE(report.find("waiting for each other inside regions (sync)"), std::string::npos);
  EXPECT_NE(report.find("serial ms"), std::string::npos);
  EXPECT_NE(report.find("extrapolated to Kimi-K2.5's 61 layers"), std::string::npos);
  EXPECT_NE(report.find("load GB/s"), std::string::npos);
  EXPECT_NE(report.find("routed experts' memory: a load-only read"), std::string::npos);
  EXPECT_NE(report.find("at the rates the weights' own memory gave"), std::string::npos);
}

// Prefill FLOPs: every active matrix per prompt token, except lm_head, run for the last token only.
TEST_F(DecodeBreakdownTest, PrefillFlopsCountTheLmHeadOnce) {
  Model& m = *model_;
  const LatencyOptions o = short_run(16, 2, 1);
  const LatencyResult r = run_latency_bench(m, o);
  const double head = double(m.weights().lm_head.rows * m.weights().lm_head.cols);
  const double active = double(m.weights().active_params_per_token);
  EXPECT_DOUBLE_EQ(r.prefill_flops_per_token, 2 * (active - head) + 2 * head / 16);
  EXPECT_LT(r.prefill_flops_per_token, 2 * active);
}

// The latency runs read every weight once before timing, and say so with the rate.
TEST_F(DecodeBreakdownTest, WeightsAreReadOnceBeforeTiming) {
  Model& m = *model_;
  EXPECT_GT(read_weights_once(m), 0.0);
  const LatencyOptions o = short_run(4, 2, 1);
  const LatencyResult r = run_latency_bench(m, o);
  EXPECT_GT(r.first_read_rate, 0.0);
  EXPECT_NE(format_latency_report(m, o, r).find("weights: read once before timing, at "), std::string::npos);
}

// --num-iters-warmup: the untimed iterations generate through the engine like the timed ones (a
// process's first iteration faults in its buffers); a negative count is refused.
TEST_F(DecodeBreakdownTest, WarmupIterationsRunUntimedFirst) {
  Model& m = *model_;
  LatencyOptions o = short_run(4, 2, 2);
  for (const int warmup : {0, 1, 2}) {
    o.warmup_iterations = warmup;
    const LatencyResult r = run_latency_bench(m, o);
    EXPECT_EQ(r.generations, 2 + warmup);
    EXPECT_NE(format_latency_report(m, o, r).find("best of 2 after " + std::to_string(warmup) + " untimed"),
              std::string::npos);
  }
  std::vector<LatencyVariant> variants(2);
  for (LatencyVariant& v : variants) v.model = &m;
  o.warmup_iterations = 1;
  run_latency_comparison(variants, o);
  for (const LatencyVariant& v : variants) EXPECT_EQ(v.result.generations, 3);
  o.warmup_iterations = -1;
  EXPECT_THROW(run_latency_bench(m, o), Error);
}

// Decode steps of several sequences: weights are read once a step, KV rows and (the expected
// union of) routed experts per sequence, and the extrapolation is per token.
TEST_F(DecodeBreakdownTest, BatchedSteps) {
  Model& m = *model_;
  LatencyOptions o;
  o.input_len = 8;
  o.output_len = 6;
  const DecodeBreakdown one = measure_decode_breakdown(m, o, 1);
  const DecodeBreakdown four = measure_decode_breakdown(m, o, 4);
  EXPECT_EQ(four.batch, 4);
  EXPECT_EQ(four.steps, o.output_len);
  EXPECT_DOUBLE_EQ(one.mean_context, 8 + 3.5);
  EXPECT_NEAR(four.bytes[1][size_t(Phase::RoutedExperts)], expected_routed_bytes(m, one, 4), 1e-6);
  EXPECT_GT(four.bytes[1][size_t(Phase::Attention)], one.bytes[1][size_t(Phase::Attention)]);  // 4x the KV rows
  EXPECT_EQ(four.bytes[1][size_t(Phase::SharedExpert)], one.bytes[1][size_t(Phase::SharedExpert)]);
  const DecodeExtrapolation x = extrapolate_decode(m, four, 1e10, 5, 1);
  ASSERT_TRUE(x.possible);
  double step = 0;
  for (const auto& row : four.seconds)
    for (double s : row) step += s;
  step += four.other_seconds;
  // 5 of this model's 3 layers: the per-step sum rescaled, then per token.
  EXPECT_NEAR(x.tokens_per_s * x.seconds_per_token, 1.0, 1e-9);
  EXPECT_GT(x.seconds_per_token, step / 4);  // more layers than measured, per token of 4
  EXPECT_THROW(measure_decode_breakdown(m, o, 0), Error);
}

// Steps of a verification's shape (one sequence, k + 1 tokens, logits for each): the model runs
// that many tokens and logit rows a step, the KV and expert bytes count every token, and no
// decode speed is extrapolated from them.
TEST_F(DecodeBreakdownTest, VerificationShapedSteps) {
  Model& m = *model_;
  LatencyOptions o;
  o.input_len = 8;
  o.output_len = 6;
  const DecodeBreakdown one = measure_decode_breakdown(m, o, 1);
  EXPECT_DOUBLE_EQ(one.tokens_per_step, 1);
  EXPECT_DOUBLE_EQ(one.logit_rows_per_step, 1);
  const DecodeBreakdown v = measure_decode_breakdown(m, o, 1, 4);
  EXPECT_EQ(v.step_tokens, 4);
  EXPECT_EQ(v.steps, o.output_len);
  EXPECT_DOUBLE_EQ(v.tokens_per_step, 4);
  EXPECT_DOUBLE_EQ(v.logit_rows_per_step, 4);
  EXPECT_DOUBLE_EQ(v.mean_context, 8 + 4 * 2.5 + 2.5);  // token t of step i reads 8 + 4 i + t + 1 rows
  EXPECT_NEAR(v.bytes[1][size_t(Phase::RoutedExperts)], expected_routed_bytes(m, one, 4), 1e-6);
  EXPECT_GT(v.bytes[1][size_t(Phase::Attention)], one.bytes[1][size_t(Phase::Attention)]);
  const std::string report = format_decode_breakdown(m, v, 1e10);
  EXPECT_NE(report.find("1 sequences x 4 tokens (a verification step's shape)"), std::string::npos) << report;
  EXPECT_EQ(report.find("extrapolated to"), std::string::npos);
  // Two sequences of 3: both counts per step.
  const DecodeBreakdown two = measure_decode_breakdown(m, o, 2, 3);
  EXPECT_DOUBLE_EQ(two.tokens_per_step, 6);
  EXPECT_DOUBLE_EQ(two.logit_rows_per_step, 6);
  EXPECT_THROW(measure_decode_breakdown(m, o, 1, 0), Error);
}

}  // namespace
}  // namespace kimi
