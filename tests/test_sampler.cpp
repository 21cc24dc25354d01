// The sampler, step by step against vLLM's semantics, and SamplingParams validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "common/error.h"
#include "common/rng.h"
#include "engine/sampler.h"

namespace kimi {
namespace {

const std::vector<float> kLogits = {0.1f, 2.0f, -1.0f, 1.9f, 0.5f};

SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

std::vector<float> random_row(size_t n, uint64_t seed, double scale = 3.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng.normal() * scale);
  return v;
}

// Draws n tokens, each from a fresh copy of the row (sample() overwrites it).
std::vector<int32_t> draws(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    out.push_back(s.sample(row, {}, {}).token);
  }
  return out;
}

std::set<int32_t> drawn_set(const SamplingParams& p, const std::vector<float>& logits, int n = 3000) {
  Sampler s(p, 11, -1);
  const auto d = draws(s, logits, n);
  return {d.begin(), d.end()};
}

// Logits whose softmax is exactly the given probabilities.
std::vector<float> from_probs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double q : probs) l.push_back(float(std::log(q)));
  return l;
}

TEST(Sampler, GreedyIsArgmaxOfTheProcessedRow) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto row = random_row(1000, seed);
    Sampler s(params(0.0f), seed, -1);
    std::vector<float> copy = row;
    EXPECT_EQ(s.sample(copy, {}, {}).token, argmax(row));
  }
  Sampler tiny(params(1e-6f), 1, -1);  // below vLLM's epsilon: greedy too
  for (int i = 0; i < 10; ++i) EXPECT_EQ(draws(tiny, kLogits, 1)[0], 1);
}

TEST(Sampler, ArgmaxTakesTheLowestIndexAmongEqualMaxima) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  for (const SamplingParams& p : {params(1.0f), params(0.8f, 3), params(1.2f, 0, 0.9f)}) {
    Sampler a(p, 42, -1), b(p, 42, -1), c(p, 43, -1);
    const auto xa = draws(a, kLogits, 50), xb = draws(b, kLogits, 50), xc = draws(c, kLogits, 50);
    EXPECT_EQ(xa, xb);
    EXPECT_NE(xa, xc);
  }
}

TEST(Sampler, FollowsTheTemperedDistribution) {
  for (float t : {1.0f, 0.5f, 2.0f}) {
    Sampler s(params(t), 3, -1);
    std::vector<int> counts(kLogits.size());
    const int n = 20000;
    for (int32_t tok : draws(s, kLogits, n)) counts[size_t(tok)]++;
    double z = 0;
    for (float l : kLogits) z += std::exp(l / t);
    for (size_t i = 0; i < kLogits.size(); ++i)
      EXPECT_NEAR(counts[i] / double(n), std::exp(kLogits[i] / t) / z, 0.015) << "T=" << t << " token " << i;
  }
}

TEST(Sampler, TopLogprobsMatchADirectDoubleComputation) {
  const auto row = random_row(5000, 7, 4.0);
  double mx = -1e300, z = 0;
  for (float l : row) mx = std::max(mx, double(l));
  for (float l : row) z += std::exp(double(l) - mx);
  const double lse = mx + std::log(z);
  float lp_of = 0;
  const auto top = top_logprobs(row, 20, &lp_of, 123);
  ASSERT_EQ(top.size(), 20u);
  EXPECT_NEAR(lp_of, double(row[123]) - lse, 1e-5);
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(top[i].token, ids[i]);
    EXPECT_NEAR(top[i].logprob, double(row[size_t(ids[i])]) - lse, 1e-5);
  }
  EXPECT_TRUE(top_logprobs(row, 0).empty());
  // Across the whole float exp range (logits 90 apart): still within float rounding.
  std::vector<float> wide(1000);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = -90.0f + 0.09f * float(i);
  double wz = 0;
  for (float l : wide) wz += std::exp(double(l) - double(wide.back()));
  for (int32_t t : {0, 17, 500, 998, 999}) {
    float got = 0;
    top_logprobs(wide, 1, &got, t);
    EXPECT_NEAR(got, double(wide[size_t(t)]) - double(wide.back()) - std::log(wz), 2e-6 * (1 + std::abs(got))) << t;
  }
  // Ties go to the lower id.
  const auto tied = top_logprobs(std::vector<float>{0.0f, 1.0f, 1.0f, 1.0f}, 2);
  EXPECT_EQ(tied[0].token, 1);
  EXPECT_EQ(tied[1].token, 2);
  EXPECT_NEAR(tied[0].logprob, std::log(std::exp(1.0) / (1 + 3 * std::exp(1.0))), 1e-6);
}

TEST(Sampler, LogprobsAreOfTheRawDistribution) {
  SamplingParams p = params(1.0f);
  p.logprobs = 2;
  p.logit_bias = {{2, 100.0f}};  // forces token 2, which the raw distribution thinks unlikely
  Sampler s(p, 5, -1);
  std::vector<float> row = kLogits;
  const SampleResult r = s.sample(row, {}, {});
  double z = 0;
  for (float l : kLogits) z += std::exp(double(l));
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, kLogits[2] - std::log(z), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 3);
  EXPECT_NEAR(r.top[0].logprob, kLogits[1] - std::log(z), 1e-6);

  Sampler none(params(1.0f), 5, -1);  // not asked for: no logprob computed
  row = kLogits;
  const SampleResult q = none.sample(row, {}, {});
  EXPECT_TRUE(std::isnan(q.logprob));
  EXPECT_TRUE(q.top.empty());
}

TEST(Sampler, LogitBiasForcesAndForbids) {
  SamplingParams p = params(1.0f);
  p.logit_bias = {{4, 100.0f}};
  EXPECT_EQ(drawn_set(p, kLogits, 200), (std::set<int32_t>{4}));
  SamplingParams g = params(0.0f);
  g.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(drawn_set(g, kLogits, 5), (std::set<int32_t>{3}));
}

TEST(Sampler, MinTokensMasksEosAndStopTokens) {
  const std::vector<float> row = {0.0f, 5.0f, 4.0f, 3.0f};  // eos 1 first, stop token 2 next
  SamplingParams p = params(0.0f);
  p.min_tokens = 2;
  p.stop_token_ids = {2};
  Sampler s(p, 0, 1);
  const std::vector<int32_t> out = {3, 3, 3};
  for (size_t produced = 0; produced <= 3; ++produced) {
    std::vector<float> r = row;
    const int32_t t = s.sample(r, {}, std::span<const int32_t>(out).first(produced)).token;
    EXPECT_EQ(t, produced < 2 ? 3 : 1) << produced;
  }
  // Several eos ids: all masked.
  Sampler multi(p, 0, std::vector<int32_t>{1, 3});
  std::vector<float> r = row;
  EXPECT_EQ(multi.sample(r, {}, {}).token, 0);
  // ignore_eos: eos does not end the sequence, so vLLM leaves it alone.
  p.ignore_eos = true;
  Sampler ig(p, 0, 1);
  r = row;
  EXPECT_EQ(ig.sample(r, {}, {}).token, 1);
}

TEST(Sampler, PenaltiesOnAHandExample) {
  SamplingParams p = params(0.0f);  // greedy leaves the processed logits in the row
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p, 0, -1);
  std::vector<float> row = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
  const std::vector<int32_t> prompt = {0, 1, 0}, output = {3, 3, 2};
  s.sample(row, prompt, output);
  // Repetition over prompt + output, once per distinct token (positive / p, negative x p),
  // then frequency x count + presence over the output only.
  const std::vector<float> want = {2.0f / 2, -1.0f * 2, 0.5f / 2 - 0.5f - 0.25f, 3.0f / 2 - 0.5f * 2 - 0.25f, 1.0f};
  for (size_t i = 0; i < row.size(); ++i) EXPECT_FLOAT_EQ(row[i], want[i]) << i;
  // The scratch state is clean: a second call with no history changes nothing.
  std::vector<float> again = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
  s.sample(again, {}, {});
  EXPECT_EQ(again, (std::vector<float>{2.0f, -1.0f, 0.5f, 3.0f, 1.0f}));
}

TEST(Sampler, PenaltiesChangeTheChoice) {
  SamplingParams p = params(0.0f);
  p.frequency_penalty = 1.0f;
  Sampler s(p, 0, -1);
  std::vector<float> row = kLogits;  // 2.0 at 1, 1.9 at 3
  const std::vector<int32_t> out = {1};
  EXPECT_EQ(s.sample(row, {}, out).token, 3);
}

TEST(Sampler, TruncationSets) {
  const auto l = from_probs({0.4, 0.3, 0.2, 0.1});
  EXPECT_EQ(drawn_set(params(1.0f, 2), l), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(drawn_set(params(1.0f, 0, 0.65f), l), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(drawn_set(params(1.0f, 0, 0.75f), l), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(drawn_set(params(1.0f, 0, 0.3f), l), (std::set<int32_t>{0}));  // at least one
  EXPECT_EQ(drawn_set(params(1.0f, -1, 1.0f), l), (std::set<int32_t>{0, 1, 2, 3}));
  // top-p applies to the top-k set renormalised: {.4,.3,.2}/.9, 0.444 < 0.5 <= 0.777.
  EXPECT_EQ(drawn_set(params(1.0f, 3, 0.5f), l), (std::set<int32_t>{0, 1}));
  SamplingParams mp = params(1.0f);
  mp.min_p = 0.3f;  // threshold 0.3 x 0.4 = 0.12
  EXPECT_EQ(drawn_set(mp, l), (std::set<int32_t>{0, 1, 2}));
  mp.min_p = 0.8f;  // 0.32: only the top
  EXPECT_EQ(drawn_set(mp, l), (std::set<int32_t>{0}));
  // min_p is relative to the tempered distribution: at T=0.5 the probabilities are
  // proportional to .16, .09, .04, .01, so 0.3 x .16 = .048 drops tokens 2 and 3.
  mp = params(0.5f);
  mp.min_p = 0.3f;
  EXPECT_EQ(drawn_set(mp, l), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, TruncatedDrawsKeepTheRenormalisedProportions) {
  const auto l = from_probs({0.4, 0.3, 0.2, 0.1});
  Sampler s(params(1.0f, 0, 0.65f), 9, -1);
  const int n = 20000;
  int zero = 0;
  for (int32_t t : draws(s, l, n)) zero += t == 0;
  EXPECT_NEAR(zero / double(n), 0.4 / 0.7, 0.015);
}

TEST(Sampler, TopPOnALargeFlatRowMatchesAFullSort) {
  // Flat enough that the kept set runs past the first sorted chunks.
  for (float top_p : {0.3f, 0.9f}) {
    for (int top_k : {0, 2000}) {
      const auto row = random_row(5000, 21, 0.5);
      std::vector<int32_t> ids(row.size());
      std::iota(ids.begin(), ids.end(), 0);
      std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
      if (top_k > 0) ids.resize(size_t(top_k));
      double z = 0;
      for (int32_t id : ids) z += std::exp(double(row[size_t(id)]));
      std::set<int32_t> want;
      double cum = 0;
      for (int32_t id : ids) {
        if (cum >= top_p * z) break;
        cum += std::exp(double(row[size_t(id)]));
        want.insert(id);
      }
      ASSERT_GT(want.size(), 300u);
      const auto got = drawn_set(params(1.0f, top_k, top_p), row, 2000);
      EXPECT_TRUE(std::includes(want.begin(), want.end(), got.begin(), got.end())) << top_p << " " << top_k;
      EXPECT_GT(got.size(), want.size() / 3);
    }
  }
}

TEST(Sampler, AllMaskedFallsBackToArgmax) {
  const float inf = std::numeric_limits<float>::infinity();
  Sampler s(params(1.0f), 1, -1);
  std::vector<float> row = {-inf, -inf, -inf};
  EXPECT_EQ(s.sample(row, {}, {}).token, 0);
}

void expect_invalid(const SamplingParams& p, const std::string& field) {
  try {
    p.validate(100);
    ADD_FAILURE() << "accepted bad " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(SamplingParams, Validation) {
  SamplingParams ok;
  ok.top_k = -1;
  ok.logprobs = 20;
  ok.prompt_logprobs = 0;
  ok.stop_token_ids = {0, 99};
  ok.logit_bias = {{5, -100.0f}, {6, 100.0f}};
  ok.min_tokens = ok.max_tokens;
  EXPECT_NO_THROW(ok.validate(100));
  EXPECT_NO_THROW(SamplingParams().validate(1));

  const auto with = [](auto edit) {
    SamplingParams p;
    edit(p);
    return p;
  };
  expect_invalid(with([](SamplingParams& p) { p.n = 0; }), "n must");
  expect_invalid(with([](SamplingParams& p) { p.temperature = -0.1f; }), "temperature");
  expect_invalid(with([](SamplingParams& p) { p.temperature = NAN; }), "temperature");
  expect_invalid(with([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p");
  expect_invalid(with([](SamplingParams& p) { p.top_p = 1.01f; }), "top_p");
  expect_invalid(with([](SamplingParams& p) { p.top_k = -2; }), "top_k");
  expect_invalid(with([](SamplingParams& p) { p.min_p = 1.5f; }), "min_p");
  expect_invalid(with([](SamplingParams& p) { p.presence_penalty = 2.5f; }), "presence_penalty");
  expect_invalid(with([](SamplingParams& p) { p.frequency_penalty = -2.5f; }), "frequency_penalty");
  expect_invalid(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty");
  expect_invalid(with([](SamplingParams& p) { p.max_tokens = 0; }), "max_tokens");
  expect_invalid(with([](SamplingParams& p) { p.min_tokens = -1; }), "min_tokens");
  expect_invalid(with([](SamplingParams& p) { p.min_tokens = p.max_tokens + 1; }), "min_tokens");
  expect_invalid(with([](SamplingParams& p) { p.logprobs = 21; }), "logprobs must be in [0, 20]");
  expect_invalid(with([](SamplingParams& p) { p.logprobs = -1; }), "logprobs");
  expect_invalid(with([](SamplingParams& p) { p.prompt_logprobs = 21; }), "prompt_logprobs");
  expect_invalid(with([](SamplingParams& p) { p.stop_token_ids = {100}; }), "stop_token_ids");
  expect_invalid(with([](SamplingParams& p) { p.stop = {"x", ""}; }), "stop");
  expect_invalid(with([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }), "logit_bias");
  expect_invalid(with([](SamplingParams& p) { p.logit_bias = {{1, 100.5f}}; }), "logit_bias");
}

}  // namespace
}  // namespace kimi
