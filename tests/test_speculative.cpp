// Speculative decoding through the engine on the trained mini model: token ids at temperature 0
// equal those without speculation (alone, batched, with chunked prefill, prefix hits and
// preemption in the mix, with stops and max_tokens inside an accepted run), seeded sampling is
// reproducible, the metrics add up; random Eagle3 drafts and a random MTP layer on the tiny preset
// change no token; and the rejection rule keeps the target's distribution exactly (a chi-square
// test that a wrong rule fails).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/rng.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/eagle3_draft.h"
#include "test_util.h"

namespace kimi {
namespace {

class SpeculativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto dir = test::mini_model_dir();
    if (!dir.empty()) model_ = std::make_unique<Model>(dir);
  }
  static void TearDownTestSuite() { model_.reset(); }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "models/mini is absent";
  }

  static EngineConfig config(const std::string& speculative, int64_t kv_blocks = 256, int64_t batched_tokens = 512) {
    EngineConfig c;
    c.block_size = 4;
    c.scheduler.max_model_len = 256;
    c.scheduler.max_num_batched_tokens = batched_tokens;
    c.scheduler.max_num_seqs = 16;
    c.num_kv_blocks_override = kv_blocks;
    c.speculative = spec::parse_speculative_config(speculative);
    return c;
  }

  // Prompts that repeat a phrase with variations: the trained model continues them in ways an
  // n-gram lookup partly predicts, so both accepted and rejected drafts occur.
  static std::vector<std::vector<int32_t>> prompts() {
    std::vector<std::vector<int32_t>> out;
    Rng rng(7);
    for (int p = 0; p < 6; ++p) {
      std::vector<int32_t> phrase(size_t(5 + p));
      for (auto& t : phrase) t = int32_t(300 + rng.next_u64() % 3000);
      std::vector<int32_t> prompt;
      for (int rep = 0; rep < 3; ++rep) {
        prompt.insert(prompt.end(), phrase.begin(), phrase.end());
        prompt.push_back(int32_t(300 + rng.next_u64() % 3000));  // a variation between repeats
      }
      out.push_back(prompt);
    }
    return out;
  }

  static SamplingParams greedy(int64_t max_tokens) { return test::greedy(max_tokens); }

  static std::vector<std::vector<int32_t>> run(Engine& e, const std::vector<std::vector<int32_t>>& ps,
                                               const SamplingParams& sp) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& c : e.generate(ps, sp)) out.push_back(c[0].token_ids);
    EXPECT_FALSE(e.has_unfinished());
    EXPECT_EQ(e.kv_cache().pool().check(), "");
    EXPECT_EQ(e.kv_cache().pool().num_free(), e.kv_cache().pool().num_blocks()) << "leaked KV blocks";
    return out;
  }

  static inline std::unique_ptr<Model> model_;
};

const char* kNgram = R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3})";

// The trained Eagle3 draft of mini (models/mini-eagle3), k drafts per step, drafting at every
// batch size (by default a draft model pauses above one sequence) so that batches verify.
std::string eagle3(int k = 3, const char* name = "mini-eagle3") {
  const auto draft = test::mini_model_dir().parent_path() / name;
  return R"({"method":"eagle3","model":")" + draft.string() + R"(","num_speculative_tokens":)" + std::to_string(k) +
         R"(,"disable_by_batch_size":0})";
}

TEST_F(SpeculativeTest, GreedyNgramEqualsPlainAloneAndBatched) {
  const auto ps = prompts();
  Engine plain(*model_, nullptr, config(""));
  const auto want = run(plain, ps, greedy(40));
  Engine spec(*model_, nullptr, config(kNgram));
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(run(spec, {ps[i]}, greedy(40))[0], want[i]) << "alone " << i;
  EXPECT_EQ(run(spec, ps, greedy(40)), want) << "batched";
  const EngineStats st = spec.stats();
  EXPECT_GT(st.spec_accepted_tokens, 0) << "no draft was ever accepted: the test exercises nothing";
  EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens) << "no draft was ever rejected";
  EXPECT_GT(st.spec_acceptance_length(), 1.0);
  // vLLM's counters: per position, accepted counts never grow with the position.
  const MetricsSnapshot m = spec.metrics().snapshot();
  EXPECT_EQ(int64_t(m.spec_num_drafts), st.spec_drafts);
  EXPECT_EQ(int64_t(m.spec_num_accepted_tokens), st.spec_accepted_tokens);
  ASSERT_EQ(m.spec_accepted_per_pos.size(), 3u);
  uint64_t sum = 0;
  for (size_t j = 0; j < 3; ++j) {
    sum += m.spec_accepted_per_pos[j];
    if (j > 0) {
      EXPECT_LE(m.spec_accepted_per_pos[j], m.spec_accepted_per_pos[j - 1]);
    }
  }
  EXPECT_EQ(sum, m.spec_num_accepted_tokens);
  const std::string prom = spec.metrics().render_prometheus("mini");
  for (const char* name : {"kimi:spec_decode_num_drafts_total", "kimi:spec_decode_num_draft_tokens_total",
                           "kimi:spec_decode_num_accepted_tokens_total",
                           "kimi:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"mini\",position=\"2\"}"})
    EXPECT_NE(prom.find(name), std::string::npos) << name;
}

TEST_F(SpeculativeTest, GreedyEagle3EqualsPlainAloneAndBatched) {
  const auto ps = prompts();
  Engine plain(*model_, nullptr, config(""));
  const auto want = run(plain, ps, greedy(40));
  for (int k : {1, 3}) {
    Engine spec(*model_, nullptr, config(eagle3(k)));
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(run(spec, {ps[i]}, greedy(40))[0], want[i]) << "alone " << i << " k " << k;
    EXPECT_EQ(run(spec, ps, greedy(40)), want) << "batched, k " << k;
    const EngineStats st = spec.stats();
    EXPECT_GT(st.spec_accepted_tokens, 0) << "k " << k;
    EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens) << "k " << k;
  }
  // Chunked prefill, prefix hits and preemption with the draft's own cache in the same blocks.
  auto shared = ps;
  for (size_t i = 3; i < shared.size(); ++i) shared[i].insert(shared[i].begin(), shared[i - 3].begin(), shared[i - 3].end());
  const auto want_shared = run(plain, shared, greedy(32));
  Engine tight(*model_, nullptr, config(eagle3(3), 64, 64));
  EXPECT_EQ(run(tight, shared, greedy(32)), want_shared);
  EXPECT_EQ(run(tight, shared, greedy(32)), want_shared) << "again, with the prefix cache warm";
  EXPECT_GT(tight.stats().preemptions, 0);
  EXPECT_GT(tight.stats().prefix_hits, 0);
}

// models/mini-eagle3-fr1024 is mini-eagle3 with the lm_head rows of the target's 1024 most
// frequent tokens only (reference/prune_draft_vocab.py: d2t, t2d, the target's embedding shared).
// Its proposals are the full draft's whenever the full draft's choice is among them, so it must
// keep nearly all of the full draft's accepted tokens; a wrong d2t offset or row order loses them.
TEST_F(SpeculativeTest, TheFrequencyPrunedDraftKeepsTheFullDraftsAcceptance) {
  const auto ps = prompts();
  Engine plain(*model_, nullptr, config(""));
  const auto want = run(plain, ps, greedy(40));
  Engine full(*model_, nullptr, config(eagle3(3)));
  EXPECT_EQ(run(full, ps, greedy(40)), want);
  Engine pruned(*model_, nullptr, config(eagle3(3, "mini-eagle3-fr1024")));
  EXPECT_EQ(run(pruned, ps, greedy(40)), want);
  const EngineStats f = full.stats(), p = pruned.stats();
  EXPECT_GT(f.spec_accepted_tokens, 20) << "the full draft is accepted too rarely for a comparison";
  EXPECT_GE(double(p.spec_accepted_tokens), 0.9 * double(f.spec_accepted_tokens))
      << "pruned " << p.spec_accepted_tokens << " of " << p.spec_draft_tokens << ", full " << f.spec_accepted_tokens
      << " of " << f.spec_draft_tokens;
}

// Beside a bf16 target cache the draft's rows are bf16 too (half the draft's KV bytes, counted in
// the budget the engine reports) and the tokens are still exactly the target's own.
TEST_F(SpeculativeTest, ABf16CacheNarrowsTheDraftsRowsAndChangesNoToken) {
  const auto ps = prompts();
  auto bf16 = [&](const std::string& spec) {
    EngineConfig c = config(spec);
    c.kv_cache_dtype = KvCacheDtype::BFloat16;
    return c;
  };
  Engine plain(*model_, nullptr, bf16(""));
  const auto want = run(plain, ps, greedy(32));
  const int64_t target_bytes = plain.metrics().snapshot().kv_cache.bytes_per_token;
  Engine spec(*model_, nullptr, bf16(eagle3(3)));
  EXPECT_EQ(run(spec, ps, greedy(32)), want);
  EXPECT_GT(spec.stats().spec_accepted_tokens, 0);
  const Eagle3Config dc = Eagle3Config::load(test::mini_model_dir().parent_path() / "mini-eagle3", model_->config());
  EXPECT_EQ(spec.metrics().snapshot().kv_cache.bytes_per_token,
            target_bytes + 2 * dc.num_key_value_heads * dc.head_dim * int64_t(sizeof(uint16_t)));
}

// With `--dtype bfloat16` the target and its draft both round their activations to bf16: the
// tokens are still exactly the (bf16-activation) target's own, and the draft is still accepted.
TEST_F(SpeculativeTest, Bf16ActivationsChangeNoTokenOfTheirTarget) {
  ModelOptions o;
  o.quantization.activations = ActivationDtype::BFloat16;
  Model bf16(test::mini_model_dir(), o);
  const auto ps = prompts();
  Engine plain(bf16, nullptr, config(""));
  const auto want = run(plain, ps, greedy(32));
  Engine spec(bf16, nullptr, config(eagle3(3)));
  EXPECT_EQ(run(spec, ps, greedy(32)), want);
  EXPECT_GT(spec.stats().spec_accepted_tokens, 20);
}

TEST_F(SpeculativeTest, ADraftThatDoesNotFitIsAClearError) {
  test::TempDir dir;
  // A draft for another target: the tiny preset's hidden size.
  const auto draft = dir.path() / "tiny-eagle3";
  ASSERT_EQ(test::run_kimi("make-model " + draft.string() + " --preset tiny --draft eagle3").status, 0);
  const std::string c = R"({"method":"eagle3","model":")" + draft.string() + R"(","num_speculative_tokens":3})";
  const std::string err = test::error_of([&] { Engine e(*model_, nullptr, config(c)); });
  EXPECT_NE(err.find("hidden"), std::string::npos) << err;
}

TEST_F(SpeculativeTest, ChunkedPrefillPrefixHitsAndPreemptionKeepTheTokens) {
  auto ps = prompts();
  // Shared prefixes: the later prompts start with an earlier prompt (prefix-cache hits).
  for (size_t i = 3; i < ps.size(); ++i) ps[i].insert(ps[i].begin(), ps[i - 3].begin(), ps[i - 3].end());
  Engine plain(*model_, nullptr, config(""));
  const auto want = run(plain, ps, greedy(48));
  // 12-token chunks and a cache of 64 blocks of 4 for six sequences of up to 100 tokens.
  Engine spec(*model_, nullptr, config(kNgram, 64, 12));
  EXPECT_EQ(run(spec, ps, greedy(48)), want);
  EXPECT_EQ(run(spec, ps, greedy(48)), want) << "again, with the prefix cache warm";
  const EngineStats st = spec.stats();
  EXPECT_GT(st.preemptions, 0) << "the cache was meant to be too small for all at once";
  EXPECT_GT(st.prefix_hits, 0);
  EXPECT_GT(st.spec_accepted_tokens, 0);
}

TEST_F(SpeculativeTest, StopsAndLimitsInsideAnAcceptedRun) {
  const auto ps = prompts();
  Engine plain(*model_, nullptr, config(""));
  Engine spec(*model_, nullptr, config(kNgram));
  for (int64_t max_tokens : {1, 2, 5, 7, 13}) EXPECT_EQ(run(spec, ps, greedy(max_tokens)), run(plain, ps, greedy(max_tokens)));
  // A stop token taken from the middle of the plain output: both stop at its first occurrence.
  const auto full = run(plain, ps, greedy(40));
  for (size_t i = 0; i < ps.size(); ++i) {
    SamplingParams sp = greedy(40);
    sp.stop_token_ids = {full[i][full[i].size() / 2]};
    EXPECT_EQ(run(spec, {ps[i]}, sp), run(plain, {ps[i]}, sp)) << i;
  }
  // logprobs of every token, accepted drafts included, as without speculation.
  SamplingParams lp = greedy(24);
  lp.logprobs = 2;
  const auto a = spec.generate(ps, lp), b = plain.generate(ps, lp);
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(a[i][0].logprobs.size(), b[i][0].logprobs.size());
    for (size_t k = 0; k < a[i][0].logprobs.size(); ++k) {
      EXPECT_EQ(a[i][0].logprobs[k].token, b[i][0].logprobs[k].token);
      EXPECT_NEAR(a[i][0].logprobs[k].logprob, b[i][0].logprobs[k].logprob, 1e-4);
      ASSERT_EQ(a[i][0].logprobs[k].top.size(), 2u);
    }
  }
}

TEST_F(SpeculativeTest, SeededSamplingIsReproducibleAndDisableByBatchSizeTurnsItOff) {
  const auto ps = prompts();
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 50;
  sp.top_p = 0.9f;
  sp.repetition_penalty = 1.1f;
  sp.seed = 1234;
  sp.max_tokens = 32;
  sp.ignore_eos = true;
  Engine spec(*model_, nullptr, config(kNgram));
  const auto first = run(spec, ps, sp);
  EXPECT_EQ(run(spec, ps, sp), first);
  for (const auto& t : first) EXPECT_EQ(t.size(), 32u);
  EXPECT_GT(spec.stats().spec_drafts, 0);
  // Six requests in one step, speculation off above 2: nothing is drafted, the tokens as plain.
  Engine off(*model_, nullptr,
             config(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"disable_by_batch_size":2})"));
  Engine plain(*model_, nullptr, config(""));
  EXPECT_EQ(run(off, ps, greedy(20)), run(plain, ps, greedy(20)));
  EXPECT_EQ(off.stats().spec_drafts, 0);
}

// A draft that is mostly wrong (make-model's random Eagle3 draft for the tiny preset): nearly
// every draft is rejected, and the tokens are still exactly the target's, at any batch.
TEST(SpeculativeTiny, ARandomEagle3DraftChangesNoToken) {
  test::TempDir dir;
  const auto target = test::make_tiny_model(dir);
  const auto draft = dir.path() / "tiny-eagle3";
  ASSERT_EQ(test::run_kimi("make-model " + draft.string() + " --preset tiny --draft eagle3").status, 0);
  Model model(target);
  EngineConfig c;
  c.block_size = 4;
  c.scheduler.max_model_len = 128;
  c.num_kv_blocks_override = 128;
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  std::vector<std::vector<int32_t>> ps;
  Rng rng(3);
  for (int i = 0; i < 4; ++i) {
    ps.emplace_back(size_t(9 + 5 * i));
    for (auto& t : ps.back()) t = int32_t(rng.next_u64() % 1000);
  }
  Engine plain(model, nullptr, c);
  c.speculative = spec::parse_speculative_config(R"({"method":"eagle3","model":")" + draft.string() +
                                                 R"(","num_speculative_tokens":3,"disable_by_batch_size":0})");
  Engine spec(model, nullptr, c);
  const auto a = plain.generate(ps, sp), b = spec.generate(ps, sp);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(b[i][0].token_ids, a[i][0].token_ids) << i;
  EXPECT_GT(spec.stats().spec_draft_tokens, 0);
  EXPECT_EQ(spec.kv_cache().pool().num_free(), spec.kv_cache().pool().num_blocks());
}

// DeepSeek-V3's MTP layer (make-model --mtp-layers 1, random weights on the tiny preset, so
// nearly every draft is rejected): at temperature 0 the tokens are the target's, alone and
// batched, for 1 and 3 draft tokens (3 > num_nextn_predict_layers: the one layer chains on its
// own output), and with chunked prefill, prefix hits and preemption in the mix.
TEST(SpeculativeTiny, ARandomMtpLayerChangesNoToken) {
  test::TempDir dir;
  MakeModelOptions o;
  o.mtp_layers = 1;
  const auto target = test::make_tiny_model(dir, "tiny-mtp", o);
  Model model(target);
  EngineConfig c;
  c.block_size = 4;
  c.scheduler.max_model_len = 128;
  c.num_kv_blocks_override = 128;
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  std::vector<std::vector<int32_t>> ps;
  Rng rng(3);
  for (int i = 0; i < 4; ++i) {
    ps.emplace_back(size_t(9 + 5 * i));
    for (auto& t : ps.back()) t = int32_t(rng.next_u64() % 1000);
  }
  Engine plain(model, nullptr, c);
  const auto want = plain.generate(ps, sp);
  for (const char* method : {"mtp", "deepseek_mtp"}) {
    for (int k : {1, 3}) {
      EngineConfig sc = c;
      sc.speculative = spec::parse_speculative_config(std::string(R"({"method":")") + method +
                                                      R"(","num_speculative_tokens":)" + std::to_string(k) +
                                                      R"(,"disable_by_batch_size":0})");
      Engine spec(model, nullptr, sc);
      for (size_t i = 0; i < 2; ++i)
        EXPECT_EQ(spec.generate({ps[i]}, sp)[0][0].token_ids, want[i][0].token_ids) << method << " alone " << i << " k " << k;
      const auto got = spec.generate(ps, sp);
      for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_EQ(got[i][0].token_ids, want[i][0].token_ids) << method << " batched " << i << " k " << k;
      EXPECT_GT(spec.stats().spec_draft_tokens, 0);
      EXPECT_EQ(spec.kv_cache().pool().num_free(), spec.kv_cache().pool().num_blocks());
    }
  }
  // Shared prefixes, 12-token chunks and a cache too small for all at once.
  auto shared = ps;
  for (size_t i = 2; i < shared.size(); ++i) shared[i].insert(shared[i].begin(), shared[i - 2].begin(), shared[i - 2].end());
  const auto want_shared = plain.generate(shared, sp);
  EngineConfig tight = c;
  tight.scheduler.max_model_len = 80;  // one sequence of up to 65 tokens fits in 24 blocks; four do not
  tight.num_kv_blocks_override = 24;
  tight.scheduler.max_num_batched_tokens = 12;
  tight.speculative = spec::parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":3,"disable_by_batch_size":0})");
  Engine spec(model, nullptr, tight);
  for (int pass = 0; pass < 2; ++pass) {
    const auto got = spec.generate(shared, sp);
    for (size_t i = 0; i < shared.size(); ++i)
      EXPECT_EQ(got[i][0].token_ids, want_shared[i][0].token_ids) << "tight, pass " << pass << ", prompt " << i;
  }
  EXPECT_GT(spec.stats().preemptions, 0);
  EXPECT_GT(spec.stats().prefix_hits, 0);
  EXPECT_EQ(spec.kv_cache().pool().num_free(), spec.kv_cache().pool().num_blocks());

  // Beside a bf16 cache the layer's own MLA rows are bf16 as well: the tokens are the target's,
  // and the layer adds one bf16 MLA row per token to the KV budget (as one target layer does).
  EngineConfig narrow = c;
  narrow.kv_cache_dtype = KvCacheDtype::BFloat16;
  Engine plain_bf16(model, nullptr, narrow);
  const auto want_bf16 = plain_bf16.generate(ps, sp);
  narrow.speculative = spec::parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":3,"disable_by_batch_size":0})");
  Engine mtp_bf16(model, nullptr, narrow);
  const auto got_bf16 = mtp_bf16.generate(ps, sp);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(got_bf16[i][0].token_ids, want_bf16[i][0].token_ids) << "bf16 " << i;
  const int64_t per_layer_bf16 = plain_bf16.metrics().snapshot().kv_cache.bytes_per_token / model.config().num_hidden_layers;
  EXPECT_EQ(mtp_bf16.metrics().snapshot().kv_cache.bytes_per_token,
            plain_bf16.metrics().snapshot().kv_cache.bytes_per_token + per_layer_bf16);
}

// ---------------------------------------------------------------- the rejection rule

// Pearson's chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) x2 += std::pow(double(counts[i]) - double(n) * p[i], 2) / (double(n) * p[i]);
  return x2;
}

// The target's processed distribution (temperature 0.7, top-k 6 of 8) at one position.
struct Target {
  std::vector<float> logits = {1.0f, 0.2f, 2.1f, -0.5f, 1.6f, 0.9f, -3.0f, 0.0f};
  SamplingParams params() const {
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_k = 6;
    return p;
  }
  std::vector<double> probs() const {
    std::vector<double> w(logits.size());
    std::vector<float> sorted = logits;
    std::sort(sorted.rbegin(), sorted.rend());
    double total = 0;
    for (size_t i = 0; i < w.size(); ++i)
      total += w[i] = logits[i] >= sorted[5] ? std::exp((double(logits[i]) - 2.1) / 0.7) : 0.0;
    for (double& x : w) x /= total;
    return w;
  }
};

// 99.9th percentile of chi-square with 5 degrees of freedom (6 tokens possible): 20.52.
constexpr double kChi2Limit = 20.52;

TEST(RejectionRule, VerifiedTokensAreDistributedAsTheTarget) {
  const Target t;
  const std::vector<double> p = t.probs();
  const std::vector<int32_t> none;
  constexpr int64_t N = 40000;
  // Drafts that the target likes, dislikes, and cannot produce at all (cut by top-k).
  for (int32_t draft : {2, 7, 6}) {
    std::vector<int64_t> counts(p.size());
    int64_t accepted = 0;
    for (int64_t s = 0; s < N; ++s) {
      Sampler sampler(t.params(), uint64_t(s) * 7919 + 1, -1);
      std::vector<float> row = t.logits;
      bool ok = false;
      const int32_t tok = sampler.verify(row, none, none, {}, draft, ok).token;
      ++counts[size_t(tok)];
      accepted += ok;
      EXPECT_EQ(ok, tok == draft);
    }
    EXPECT_LT(chi_square(counts, p, N), kChi2Limit) << "draft " << draft;
    // The acceptance rate is the target's probability of the draft.
    EXPECT_NEAR(double(accepted) / N, p[size_t(draft)], 0.01) << "draft " << draft;
  }
}

TEST(RejectionRule, TheTestCatchesAWrongRule) {
  // The same statistic against a plausible mistake: after a rejection, redraw from p with the
  // draft left in. The draft is then over-represented, and the chi-square shows it.
  const Target t;
  const std::vector<double> p = t.probs();
  constexpr int64_t N = 40000;
  const int32_t draft = 2;
  std::vector<int64_t> counts(p.size());
  Rng rng(99);
  for (int64_t s = 0; s < N; ++s) {
    const double u = rng.uniform();
    int32_t tok = draft;
    if (!(u < p[size_t(draft)])) {
      double r = rng.uniform(), c = 0;
      for (size_t i = 0; i < p.size(); ++i)
        if ((c += p[i]) > r) {
          tok = int32_t(i);
          break;
        }
    }
    ++counts[size_t(tok)];
  }
  EXPECT_GT(chi_square(counts, p, N), kChi2Limit * 10);
}

TEST(RejectionRule, GreedyAcceptsExactlyTheArgmax) {
  SamplingParams g;
  g.temperature = 0;
  const std::vector<int32_t> none;
  for (int32_t draft = 0; draft < 8; ++draft) {
    Sampler s(g, 1, -1);
    std::vector<float> row = Target().logits;
    bool ok = false;
    EXPECT_EQ(s.verify(row, none, none, {}, draft, ok).token, 2);
    EXPECT_EQ(ok, draft == 2);
  }
}

}  // namespace
}  // namespace kimi
