// Perplexity (model/perplexity.h, `kimi perplexity`): the library against an independent slow
// loop over full-sequence logits, chunk boundaries, quantized loadings, the CLI and its errors;
// and, when the trained `mini` model is present, int4's cost on a committed held-out text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/perplexity.h"
#include "test_util.h"

namespace kimi {
namespace {

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = pick(rng);
  return t;
}

// The reference: every chunk through forward_sequence with logits for all its positions, and the
// negative log-likelihood of each second-half token written out in long double without the
// max-shift (the tiny model's logits are small), positions counted here, not by the library.
std::vector<double> slow_nll(Model& model, const std::vector<int32_t>& tokens, int64_t ctx) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<double> out;
  for (size_t start = 0; start + size_t(ctx) <= tokens.size(); start += size_t(ctx)) {
    const std::vector<int32_t> chunk(tokens.begin() + long(start), tokens.begin() + long(start) + ctx);
    KvCache cache(model.config(), ctx);
    const std::vector<float> logits = forward_sequence(model, chunk, cache, true);
    EXPECT_EQ(logits.size(), size_t(ctx * vocab));
    for (int64_t pos = ctx / 2; pos < ctx - 1; ++pos) {
      long double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp((long double)logits[size_t(pos * vocab + v)]);
      out.push_back(double(std::log(sum) - (long double)logits[size_t(pos * vocab + chunk[size_t(pos + 1)])]));
    }
  }
  return out;
}

using Perplexity = test::TinyModelTest;

TEST_F(Perplexity, EqualsExpMeanNllOfASlowLoop) {
  for (const int64_t ctx : {16, 17}) {
    SCOPED_TRACE(ctx);
    const std::vector<int32_t> tokens = random_tokens(size_t(3 * ctx + 5), model_->config().vocab_size, 7);
    const PerplexityResult r = evaluate_perplexity(*model_, tokens, {.ctx_size = ctx});
    const std::vector<double> ref = slow_nll(*model_, tokens, ctx);
    const int64_t per_chunk = ctx == 16 ? 7 : 8;  // ctx - 1 - ctx/2
    EXPECT_EQ(perplexity_scored_per_chunk(ctx), per_chunk);
    EXPECT_EQ(r.chunks, 3);
    EXPECT_EQ(r.tokens_evaluated, 3 * ctx);
    ASSERT_EQ(r.tokens_scored, 3 * per_chunk);
    ASSERT_EQ(ref.size(), size_t(r.tokens_scored));
    double sum = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(r.token_nll[i], ref[i], 1e-4) << i;
      sum += ref[i];
    }
    const double mean = sum / double(ref.size());
    double sq = 0;
    for (const double x : ref) sq += (x - mean) * (x - mean);
    const double ppl = std::exp(mean);
    const double err = std::sqrt(sq / double(ref.size()) / double(ref.size() - 1)) * ppl;
    EXPECT_NEAR(r.mean_nll, mean, 1e-5);
    EXPECT_NEAR(r.ppl, ppl, 1e-5 * ppl);
    EXPECT_NEAR(r.ppl_stderr, err, 1e-3 * err);
    EXPECT_GT(r.ppl_stderr, 0);
    EXPECT_GT(r.ppl, 1.0);
    EXPECT_GT(r.seconds, 0);
  }
}

TEST_F(Perplexity, TokenNllIsLogSoftmaxInDouble) {
  // Logits far apart: float's exp would overflow without the shift, and the small terms matter.
  const std::vector<float> logits = {1000.0f, 1000.0f, 990.0f};
  const double z = std::log(2.0 + std::exp(-10.0));
  EXPECT_NEAR(token_nll(logits, 0), z, 1e-12);
  EXPECT_NEAR(token_nll(logits, 2), z + 10.0, 1e-12);
}

TEST_F(Perplexity, ChunksAreIndependentAndTheRemainderIsDropped) {
  const int64_t ctx = 16;
  const std::vector<int32_t> tokens = random_tokens(size_t(2 * ctx + 9), model_->config().vocab_size, 11);
  const PerplexityResult all = evaluate_perplexity(*model_, tokens, {.ctx_size = ctx});
  ASSERT_EQ(all.chunks, 2);
  // Each chunk alone, with nothing before it, scores exactly what it scored inside the run: a
  // fresh cache per chunk, no context carried across the boundary.
  const std::span<const int32_t> t(tokens);
  const PerplexityResult c0 = evaluate_perplexity(*model_, t.subspan(0, size_t(ctx)), {.ctx_size = ctx});
  const PerplexityResult c1 = evaluate_perplexity(*model_, t.subspan(size_t(ctx), size_t(ctx)), {.ctx_size = ctx});
  std::vector<double> joined = c0.token_nll;
  joined.insert(joined.end(), c1.token_nll.begin(), c1.token_nll.end());
  EXPECT_EQ(all.token_nll, joined);
  // The 9 tokens after the last whole chunk change nothing.
  const PerplexityResult whole = evaluate_perplexity(*model_, t.subspan(0, size_t(2 * ctx)), {.ctx_size = ctx});
  EXPECT_EQ(whole.token_nll, all.token_nll);
  // --chunks 1: the first chunk only.
  const PerplexityResult one = evaluate_perplexity(*model_, tokens, {.ctx_size = ctx, .max_chunks = 1});
  EXPECT_EQ(one.chunks, 1);
  EXPECT_EQ(one.token_nll, c0.token_nll);
  // The first half is context: changing its tokens changes the scores, but not their number;
  // changing the chunk's first scored target (position ctx/2 + 1) changes the first score.
  std::vector<int32_t> other(tokens.begin(), tokens.begin() + ctx);
  other[2] = (other[2] + 1) % int32_t(model_->config().vocab_size);
  const PerplexityResult ctx_changed = evaluate_perplexity(*model_, other, {.ctx_size = ctx});
  EXPECT_EQ(ctx_changed.tokens_scored, c0.tokens_scored);
  EXPECT_NE(ctx_changed.token_nll, c0.token_nll);
  other = std::vector<int32_t>(tokens.begin(), tokens.begin() + ctx);
  other[size_t(ctx / 2 + 1)] = (other[size_t(ctx / 2 + 1)] + 1) % int32_t(model_->config().vocab_size);
  const PerplexityResult target_changed = evaluate_perplexity(*model_, other, {.ctx_size = ctx});
  EXPECT_NE(target_changed.token_nll[0], c0.token_nll[0]);
}

TEST_F(Perplexity, RejectsTooFewTokensAndBadContextSizes) {
  const std::vector<int32_t> tokens = random_tokens(15, model_->config().vocab_size, 3);
  EXPECT_EQ(test::error_of([&] { evaluate_perplexity(*model_, tokens, {.ctx_size = 16}); }),
            "you need at least 16 tokens to evaluate perplexity with a context of 16; the text tokenizes to only 15 "
            "tokens");
  EXPECT_NE(test::error_of([&] { evaluate_perplexity(*model_, tokens, {.ctx_size = 3}); }).find("at least 4"),
            std::string::npos);
  const int64_t too_long = model_->config().max_position_embeddings + 1;
  EXPECT_NE(test::error_of([&] { evaluate_perplexity(*model_, tokens, {.ctx_size = too_long}); })
                .find("max_position_embeddings"),
            std::string::npos);
}

TEST_F(Perplexity, QuantizedLoadingsAndKvDtypesDifferButStayFinite) {
  const int64_t ctx = 16;
  const std::vector<int32_t> tokens = random_tokens(size_t(3 * ctx), model_->config().vocab_size, 5);
  const PerplexityResult base = evaluate_perplexity(*model_, tokens, {.ctx_size = ctx});
  const auto check = [&](const PerplexityResult& r, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(std::isfinite(r.ppl));
    EXPECT_TRUE(std::isfinite(r.ppl_stderr));
    EXPECT_NE(r.ppl, base.ppl);  // the quantization reached the logits
    EXPECT_NE(r.token_nll, base.token_nll);
    const PerplexityRatio q = perplexity_ratio(base, r);
    EXPECT_NEAR(q.ratio, r.ppl / base.ppl, 1e-9 * q.ratio);  // exp(mean(a - b)) = exp(mean a) / exp(mean b)
    EXPECT_GT(q.ratio, 0.8);  // random weights: quantization noise, not a different model
    EXPECT_LT(q.ratio, 1.25);
    EXPECT_GT(q.ratio_stderr, 0);
    EXPECT_TRUE(std::isfinite(q.ratio_stderr));
  };
  for (const char* preset : {"int4", "w4a8", "w8a8"}) {
    Model quantized(dir_->path() / "tiny", ModelOptions{.num_threads = 2, .quantization = QuantizationRequest::parse(preset)});
    check(evaluate_perplexity(quantized, tokens, {.ctx_size = ctx}), preset);
  }
  for (const KvCacheDtype kv : {KvCacheDtype::BFloat16, KvCacheDtype::Fp8E4m3})
    check(evaluate_perplexity(*model_, tokens, {.ctx_size = ctx, .kv_cache_dtype = kv}),
          std::string(kv_cache_dtype_name(kv)));
  const PerplexityRatio self = perplexity_ratio(base, base);
  EXPECT_EQ(self.ratio, 1.0);
  EXPECT_EQ(self.ratio_stderr, 0.0);
  const PerplexityResult shorter = evaluate_perplexity(*model_, tokens, {.ctx_size = ctx, .max_chunks = 1});
  EXPECT_NE(test::error_of([&] { perplexity_ratio(base, shorter); }).find("different numbers of tokens"),
            std::string::npos);
}

// ---- the CLI ----

// English prose: a few chunks of 16 tokens with the tiny model's vocabulary (it
// splits English into short pieces), and less than one chunk of 512.
std::string sample_text() {
  return "The keeper climbs the stairs at dusk, trims the wick and winds the clockwork that turns the lens. "
         "Ships far out see the beam sweep once every ten seconds and know which headland it is. ";
}

std::string write(const test::TempDir& d, const std::string& name, const std::string& content) {
  const auto p = d.path() / name;
  std::ofstream(p, std::ios::binary) << content;
  return p.string();
}

TEST_F(Perplexity, CliTableMatchesTheLibraryForEveryCombination) {
  const std::string dir = (dir_->path() / "tiny").string();
  const std::string text = sample_text();
  const std::string file = write(*dir_, "sample.txt", text);
  const std::vector<int32_t> tokens = tokenizer_->encode(text, false);
  ASSERT_GE(tokens.size(), 48u);
  const test::CmdResult r = test::run_kimi("perplexity --model " + dir + " --file " + file +
                          " -c 16 --threads 2 --quantization none,int4 --kv-cache-dtype float32,fp8");
  ASSERT_EQ(r.status, 0) << r.out;
  const int64_t chunks = int64_t(tokens.size()) / 16;
  EXPECT_NE(r.out.find(std::to_string(tokens.size()) + " tokens; " + std::to_string(chunks) +
                       " chunks of 16 tokens, the last 7 of each scored"),
            std::string::npos)
      << r.out;
  // Rows in order, quantization-major; each PPL as the library computes it on the same tokens.
  size_t at = 0;
  for (const char* q : {"none", "int4"}) {
    Model m(dir, ModelOptions{.num_threads = 2, .quantization = QuantizationRequest::parse(q)});
    for (const KvCacheDtype kv : {KvCacheDtype::Float32, KvCacheDtype::Fp8E4m3}) {
      const PerplexityResult lib = evaluate_perplexity(m, tokens, {.ctx_size = 16, .kv_cache_dtype = kv});
      char ppl[64];
      std::snprintf(ppl, sizeof ppl, "%12.4f %10.5f", lib.ppl, lib.ppl_stderr);
      std::ostringstream row;
      row << "\n" << q << std::string(20 - std::string(q).size() + 1, ' ') << kv_cache_dtype_name(kv);
      const size_t found = r.out.find(row.str(), at);
      ASSERT_NE(found, std::string::npos) << row.str() << "\n" << r.out;
      const std::string line = r.out.substr(found + 1, r.out.find('\n', found + 1) - found - 1);
      EXPECT_NE(line.find(ppl), std::string::npos) << ppl << "\n" << line;
      char scored[32];
      std::snprintf(scored, sizeof scored, " %lld ", (long long)(chunks * 7));
      EXPECT_NE(line.find(scored), std::string::npos) << line;
      if (at == 0) {
        EXPECT_NE(line.find(" 1.0000   0.00000 "), std::string::npos) << line;
      }
      at = found + 1;
    }
  }
  EXPECT_NE(r.out.find("linears quantized on load (int4)"), std::string::npos) << r.out;

  // One combination: llama.cpp's closing line; --chunks limits the tokens scored.
  const test::CmdResult one = test::run_kimi("perplexity --model " + dir + " --file " + file + " --ctx-size 16 --chunks 2");
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_NE(one.out.find("Final estimate: PPL = "), std::string::npos) << one.out;
  EXPECT_NE(one.out.find(" 14 "), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("2 chunks of 16 tokens"), std::string::npos) << one.out;

  const test::CmdResult help = test::run_kimi("perplexity --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("only the second half"), std::string::npos) << help.out;
}

TEST_F(Perplexity, CliErrorsNameTheProblem) {
  const std::string dir = (dir_->path() / "tiny").string();
  const std::string missing = (dir_->path() / "no-such.txt").string();
  test::CmdResult r = test::run_kimi("perplexity --model " + dir + " --file " + missing);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("cannot open --file " + missing + ": No such file or directory"), std::string::npos) << r.out;

  const std::string empty = write(*dir_, "empty.txt", "");
  r = test::run_kimi("perplexity --model " + dir + " --file " + empty);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--file " + empty + " is empty"), std::string::npos) << r.out;

  // Shorter than one chunk of the default 512 tokens: llama.cpp's message, with the numbers.
  const std::string text = sample_text();
  const std::string short_file = write(*dir_, "short.txt", text);
  const size_t n = tokenizer_->encode(text, false).size();
  ASSERT_LT(n, 512u);
  r = test::run_kimi("perplexity --model " + dir + " --file " + short_file);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("you need at least 512 tokens to evaluate perplexity with a context of 512; the text "
                       "tokenizes to only " +
                       std::to_string(n) + " tokens"),
            std::string::npos)
      << r.out;

  r = test::run_kimi("perplexity --model " + dir + " --file " + short_file + " -c 16 --kv-cache-dtype fp16");
  EXPECT_EQ(r.status, 2) << r.out;
  r = test::run_kimi("perplexity --model " + dir + " --file " + short_file + " -c 16 --quantization int3");
  EXPECT_EQ(r.status, 2) << r.out;
}

// ---- the trained model ----

// int4 (routed experts int4, group 32) may raise the perplexity of the trained `mini` on held-out
// text by at most this fraction over the float weights it was quantized from.
constexpr double kInt4PerplexityMargin = 0.05;

// models/mini of the repository, or KIMI_MINI_MODEL; skipped when absent. The text is committed
// here and was written for this test, so no training split can contain it.
TEST(PerplexityMini, Int4StaysWithinTheMarginOfFloat) {
  const std::filesystem::path dir = test::mini_model_dir();
  if (dir.empty()) GTEST_SKIP() << "no trained model (models/mini or KIMI_MINI_MODEL)";
  std::ifstream f(std::filesystem::path(KIMI_TEST_DATA_DIR) / "perplexity" / "heldout.txt", std::ios::binary);
  ASSERT_TRUE(f) << "tests/data/perplexity/heldout.txt is missing";
  std::ostringstream text;
  text << f.rdbuf();
  const Tokenizer tok = Tokenizer::load(dir);
  const std::vector<int32_t> tokens = tok.encode(text.str(), false);
  Model base(dir, ModelOptions{.num_threads = 0});
  const int64_t ctx = std::min<int64_t>(256, base.config().max_position_embeddings);
  ASSERT_GE(int64_t(tokens.size()), 4 * ctx) << "the held-out text is too short for this model's vocabulary";
  const PerplexityResult f32 = evaluate_perplexity(base, tokens, {.ctx_size = ctx});
  Model int4(dir, ModelOptions{.num_threads = 0, .quantization = QuantizationRequest::parse("int4")});
  const PerplexityResult q4 = evaluate_perplexity(int4, tokens, {.ctx_size = ctx});
  const PerplexityRatio ratio = perplexity_ratio(f32, q4);
  std::printf("mini on held-out text (%lld tokens scored, ctx %lld): PPL %.4f +/- %.4f as stored, %.4f +/- %.4f int4, "
              "ratio %.4f +/- %.4f\n",
              (long long)f32.tokens_scored, (long long)ctx, f32.ppl, f32.ppl_stderr, q4.ppl, q4.ppl_stderr,
              ratio.ratio, ratio.ratio_stderr);
  EXPECT_TRUE(std::isfinite(q4.ppl));
  EXPECT_LE(ratio.ratio, 1.0 + kInt4PerplexityMargin);
}

}  // namespace
}  // namespace kimi
