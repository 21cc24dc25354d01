// The forward pass of the trained `mini` (models/mini) against golden logits of the independent
// PyTorch reference (reference/deepseek_v3_reference.py via reference/make_golden.sh) on two
// tokenized sentences of English. The tiny preset's random weights give flat logits; trained
// weights give peaked ones and routers that prefer some experts, so this checks the same code
// on the distributions real checkpoints produce: prefill in both attention forms, token-by-token
// decode, and the greedy choice at every position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "test_util.h"

namespace kimi {
namespace {

// Both sides compute in f32 from the same bf16 weights and differ by summation order only. The
// trained logits reach |20|, so the bound is relative: 1e-5 of the row's largest magnitude (f32
// rounding over sums of a few hundred terms), with 1e-4 absolute below that. A real mistake
// (rope on the wrong dims, a capture of the wrong expert) moves logits by O(0.1..1).
float tolerance(const float* golden_row, int64_t vocab) {
  float m = 0;
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, std::fabs(golden_row[i]));
  return std::max(1e-4f, 1e-5f * m);
}

struct MiniCase {
  std::vector<int32_t> ids;
  std::vector<float> logits;
};

class ReferenceLogitsMini : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path dir = test::mini_model_dir();
    if (dir.empty()) GTEST_SKIP() << "no trained model (models/mini or KIMI_MINI_MODEL)";
    model_ = std::make_unique<Model>(dir, ModelOptions{.num_threads = 2});
    const std::filesystem::path gold = std::filesystem::path(KIMI_TEST_DATA_DIR) / "golden" / "mini";
    std::ifstream in(gold / "cases.json");
    ASSERT_TRUE(in) << "missing " << gold / "cases.json";
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& c : j["cases"]) {
      MiniCase g;
      g.ids = c["ids"].get<std::vector<int32_t>>();
      ASSERT_EQ(c["shape"][1].get<int64_t>(), vocab());
      g.logits.resize(g.ids.size() * size_t(vocab()));
      std::ifstream f(gold / c["logits_file"].get<std::string>(), std::ios::binary);
      f.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * sizeof(float)));
      ASSERT_TRUE(f) << "short golden file " << c["logits_file"];
      cases_.push_back(std::move(g));
    }
    ASSERT_EQ(cases_.size(), 2u);
  }
  int64_t vocab() const { return model_->config().vocab_size; }

  void expect_rows_match(const MiniCase& g, const std::vector<float>& logits, size_t first_row, const char* what) {
    const size_t V = size_t(vocab()), rows = logits.size() / V;
    for (size_t r = 0; r < rows; ++r) {
      const float* want = &g.logits[(first_row + r) * V];
      const float* got = &logits[r * V];
      float d = 0;
      for (size_t i = 0; i < V; ++i) d = std::max(d, std::fabs(got[i] - want[i]));
      EXPECT_LT(d, tolerance(want, vocab())) << what << ": position " << first_row + r;
      // The trained model's argmax leads by a clear margin almost everywhere; where it does,
      // the greedy token must be the reference's.
      const size_t a = size_t(std::max_element(want, want + V) - want);
      float second = -INFINITY;
      for (size_t i = 0; i < V; ++i)
        if (i != a) second = std::max(second, want[i]);
      if (want[a] - second > 1e-3f) {
        EXPECT_EQ(size_t(std::max_element(got, got + V) - got), a) << what << ": greedy token at " << first_row + r;
      }
    }
  }

  std::unique_ptr<Model> model_;
  std::vector<MiniCase> cases_;
};

TEST_F(ReferenceLogitsMini, PrefillMatchesInBothAttentionForms) {
  for (AttentionMode mode : {AttentionMode::Naive, AttentionMode::Absorbed}) {
    model_->set_attention_mode(mode);
    for (const MiniCase& g : cases_) {
      KvCache cache = model_->new_cache(int64_t(g.ids.size()));
      expect_rows_match(g, forward_sequence(*model_, g.ids, cache, true), 0,
                        mode == AttentionMode::Naive ? "naive prefill" : "absorbed prefill");
    }
  }
}

TEST_F(ReferenceLogitsMini, DecodeTokenByTokenMatches) {
  model_->set_attention_mode(AttentionMode::Absorbed);
  for (const MiniCase& g : cases_) {
    KvCache cache = model_->new_cache(int64_t(g.ids.size()));
    for (size_t t = 0; t < g.ids.size(); ++t) expect_rows_match(g, forward_sequence(*model_, {&g.ids[t], 1}, cache), t, "decode");
  }
}

}  // namespace
}  // namespace kimi
