// DeepSeek-V3's MTP layer: make-model writes it (model.layers.<num_hidden_layers>, the target
// ignores it), its forward matches the independent PyTorch reference (reference/mtp_golden.py,
// tests/data/golden/tiny-mtp) and not the swapped concatenation order, the proposer fed by the
// C++ target's capture drafts the reference's tokens, and a checkpoint without the layer is a
// clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "format/checkpoint.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "model/mtp_layer.h"
#include "model/tensor_layout.h"
#include "spec/mtp_proposer.h"
#include "spec/spec_config.h"
#include "test_util.h"

namespace kimi {
namespace {

using spec::MtpProposer;
using spec::MtpProposerOptions;
using spec::ProposeRequest;

// Both sides compute in f32 from the same bf16 weights and differ by summation order only. The
// bound is 2e-5 of the row's largest magnitude, at least 1e-4; the swapped concatenation order
// moves the logits by O(1) (checked below at 100x this bound).
float tolerance(const float* row, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(row[i]));
  return std::max(1e-4f, 2e-5f * m);
}

float max_diff(const float* a, const float* b, int64_t n) {
  float d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

std::vector<float> read_f32(const std::filesystem::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  EXPECT_TRUE(f) << "short golden file " << p;
  return v;
}

constexpr int64_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 16;
// A scrambled block table, so that paging mistakes show.
const std::vector<int32_t> kBlocks = {11, 3, 14, 0, 7, 9};

MakeModelOptions with_mtp() {
  MakeModelOptions o;
  o.mtp_layers = 1;
  return o;
}

TEST(MtpLayout, MakeModelWritesTheLayerAndTheTargetIgnoresIt) {
  test::TempDir dir;
  const auto plain = test::make_tiny_model(dir, "plain");
  const auto mtp = test::make_tiny_model(dir, "mtp", with_mtp());
  const ModelConfig c = ModelConfig::load(mtp);
  ASSERT_EQ(c.num_nextn_predict_layers, 1);
  const int64_t L = c.num_hidden_layers, H = c.hidden_size;
  const Checkpoint ck(mtp);
  const auto shape = [&](const std::string& rest) {
    const TensorView* t = ck.find(layer_tensor(c, L, rest));
    return t ? t->shape : std::vector<int64_t>{};
  };
  EXPECT_EQ(shape("enorm.weight"), (std::vector<int64_t>{H}));
  EXPECT_EQ(shape("hnorm.weight"), (std::vector<int64_t>{H}));
  EXPECT_EQ(shape("eh_proj.weight"), (std::vector<int64_t>{H, 2 * H}));
  EXPECT_EQ(shape("embed_tokens.weight"), (std::vector<int64_t>{c.vocab_size, H}));
  EXPECT_EQ(shape("shared_head.norm.weight"), (std::vector<int64_t>{H}));
  EXPECT_EQ(shape("shared_head.head.weight"), (std::vector<int64_t>{c.vocab_size, H}));
  EXPECT_EQ(shape("self_attn.kv_a_layernorm.weight"), (std::vector<int64_t>{c.kv_lora_rank}));
  ASSERT_TRUE(c.is_moe_layer(L)) << "DeepSeek-V3's MTP layer is an MoE layer";
  EXPECT_EQ(shape("mlp.gate.weight"), (std::vector<int64_t>{c.n_routed_experts, H}));
  EXPECT_FALSE(shape("mlp.experts." + std::to_string(c.n_routed_experts - 1) + ".down_proj.weight").empty());
  // As in DeepSeek-V3's release, the layer's embedding and head are copies of the target's.
  const TensorView* e = ck.find(layer_tensor(c, L, "embed_tokens.weight"));
  const TensorView* te = ck.find(model_tensor(c, "embed_tokens.weight"));
  ASSERT_TRUE(e && te);
  EXPECT_TRUE(std::equal(e->data.begin(), e->data.end(), te->data.begin(), te->data.end()));
  EXPECT_EQ(ck.find(layer_tensor(c, L + 1, "enorm.weight")), nullptr);

  // The target loads and computes exactly as without the layer.
  Model a(plain, ModelOptions{.num_threads = 2}), b(mtp, ModelOptions{.num_threads = 2});
  EXPECT_EQ(b.weights().layers.size(), size_t(L));
  const std::vector<int32_t> ids = {5, 900, 31, 7, 7, 100};
  KvCache ca = a.new_cache(16), cb = b.new_cache(16);
  EXPECT_EQ(forward_sequence(a, ids, ca, true), forward_sequence(b, ids, cb, true));
}

TEST(MtpLayout, MakeModelCliFlag) {
  test::TempDir dir;
  const auto out = dir.path() / "v3";
  const test::CmdResult r = test::run_kimi("make-model " + out.string() + " --preset tiny --form deepseek-v3 --mtp-layers 1");
  ASSERT_EQ(r.status, 0) << r.out;
  const ModelConfig c = ModelConfig::load(out);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  // The flat DeepSeek-V3 form names it exactly as the release: model.layers.<L>.eh_proj.weight.
  EXPECT_NE(Checkpoint(out).find("model.layers." + std::to_string(c.num_hidden_layers) + ".eh_proj.weight"), nullptr);
  EXPECT_NE(test::run_kimi("make-model " + (dir.path() / "bad").string() + " --mtp-layers -1").status, 0);
}

TEST(MtpLayout, Int4CheckpointLoadsTheLayerAsStored) {
  // make-model --quant int4: the MTP layer's routed experts in the release's INT4 layout, its
  // eh_proj and shared head in bf16 (listed in the quantization_config's ignore list).
  test::TempDir dir;
  MakeModelOptions o = with_mtp();
  o.quant = QuantPreset::Int4;
  const auto path = test::make_tiny_model(dir, "int4", o);
  Model model(path, ModelOptions{.num_threads = 2});
  MtpLayer layer(path, model.config(), 8, 4, &model.weights().embed);
  const std::vector<int32_t> tokens = {5, 6, 7}, blocks = {2, 5};
  const std::vector<float> hidden(size_t(3 * model.config().hidden_size), 0.5f);
  const MtpSequence s{.tokens = tokens, .hidden = hidden, .first_position = 0, .block_ids = blocks};
  const MtpOutput out = layer.forward(model.pool(), {&s, 1});
  ASSERT_EQ(out.logits.size(), size_t(model.config().vocab_size));
  for (float v : out.logits) ASSERT_TRUE(std::isfinite(v));
}

class MtpGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>();
    model_dir_ = test::make_tiny_model(*dir_, "tiny-mtp", with_mtp());  // seed 0, as the golden
    model_ = std::make_unique<Model>(model_dir_, ModelOptions{.num_threads = 2});
  }
  static void TearDownTestSuite() {
    model_.reset();
    dir_.reset();
  }
  void SetUp() override {
    const std::filesystem::path gold = std::filesystem::path(KIMI_TEST_DATA_DIR) / "golden" / "tiny-mtp";
    std::ifstream in(gold / "cases.json");
    ASSERT_TRUE(in) << "missing " << gold / "cases.json";
    const nlohmann::json j = nlohmann::json::parse(in);
    prompt_ = j["prompt_ids"].get<std::vector<int32_t>>();
    tokens_ = prompt_;
    tokens_.push_back(j["target_token"].get<int32_t>());
    drafts_ = j["drafts"].get<std::vector<int32_t>>();
    hprev_ = read_f32(gold / j["hprev_file"].get<std::string>(), prompt_.size() * size_t(hidden()));
    logits_ = read_f32(gold / j["logits_file"].get<std::string>(), drafts_.size() * size_t(vocab()));
    swapped_ = read_f32(gold / j["swapped_logits_file"].get<std::string>(), drafts_.size() * size_t(vocab()));
  }
  static int64_t hidden() { return model_->config().hidden_size; }
  static int64_t vocab() { return model_->config().vocab_size; }
  int64_t n() const { return int64_t(prompt_.size()); }

  // The chain straight through the layer: rows 0..n-1 with the golden h_prev, then the drafts.
  std::vector<float> layer_chain(MtpLayer& layer, std::vector<int32_t>& drafts) {
    std::vector<float> logits;
    const std::span<const int32_t> first(tokens_.begin() + 1, tokens_.end());
    const MtpSequence s0{.tokens = first, .hidden = hprev_, .first_position = 0, .block_ids = kBlocks};
    MtpOutput out = layer.forward(model_->pool(), {&s0, 1});
    for (size_t k = 0; k < drafts_.size(); ++k) {
      logits.insert(logits.end(), out.logits.begin(), out.logits.end());
      drafts.push_back(out.argmax[0]);
      if (k + 1 == drafts_.size()) break;
      const std::vector<int32_t> tok = {out.argmax[0]};
      const std::vector<float> h = out.hidden;
      const MtpSequence s{.tokens = tok, .hidden = h, .first_position = n() + int64_t(k), .block_ids = kBlocks};
      out = layer.forward(model_->pool(), {&s, 1});
    }
    return logits;
  }

  static inline std::unique_ptr<test::TempDir> dir_;
  static inline std::filesystem::path model_dir_;
  static inline std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_, tokens_, drafts_;
  std::vector<float> hprev_, logits_, swapped_;
};

TEST_F(MtpGolden, TheLayerMatchesTheReference) {
  MtpLayer layer(model_dir_, model_->config(), kNumBlocks, kBlockSize, &model_->weights().embed);
  std::vector<int32_t> drafts;
  const std::vector<float> got = layer_chain(layer, drafts);
  EXPECT_EQ(drafts, drafts_);
  float worst = 0;
  for (size_t k = 0; k < drafts_.size(); ++k) {
    const float* want = &logits_[k * size_t(vocab())];
    const float d = max_diff(&got[k * size_t(vocab())], want, vocab());
    EXPECT_LT(d, tolerance(want, vocab())) << "draft step " << k;
    worst = std::max(worst, d / tolerance(want, vocab()));
    // The reference's chain with concat(hnorm(h), enorm(e)) is far away: the comparison above
    // fails for an implementation with the swapped order.
    EXPECT_GT(max_diff(&swapped_[k * size_t(vocab())], want, vocab()), 100 * tolerance(want, vocab())) << k;
  }
  std::printf("largest difference from the golden MTP logits: %.3f of the tolerance\n", double(worst));
}

TEST_F(MtpGolden, TheProposerFedByTheTargetDraftsTheReferenceTokens) {
  // The C++ target's last-layer capture over prompt + t; the proposer applies the final norm.
  const int64_t L = model_->config().num_hidden_layers;
  KvCache cache = model_->new_cache(64);
  ForwardBatch fb;
  fb.seqs.push_back({.tokens = prompt_, .kv = cache.view(), .num_logits = 1});
  fb.capture_hidden_layers = {L};
  const ForwardResult r = model_->forward(fb);
  const int32_t t = int32_t(std::max_element(r.logits.begin(), r.logits.end()) - r.logits.begin());
  ASSERT_EQ(t, tokens_.back()) << "the C++ target's greedy token differs from the reference's";

  MtpProposer p(model_dir_, model_->config(), model_->pool(),
                MtpProposerOptions{kNumBlocks, kBlockSize, &model_->weights().embed, model_->weights().final_norm});
  EXPECT_EQ(p.capture_layers(), std::vector<int64_t>{L});
  p.set_keep_logits(true);
  // Two steps as an engine runs them: a prefill chunk of 9 positions (no drafts), then the rest.
  const int64_t H = hidden(), split = 9;
  auto request = [&](int64_t first, int64_t count, int64_t num_drafts) {
    return ProposeRequest{.request_id = "r",
                          .tokens = tokens_,
                          .first_position = first,
                          .num_positions = count,
                          .hidden_states = std::span<const float>(r.hidden_states).subspan(size_t(first * H), size_t(count * H)),
                          .block_ids = kBlocks,
                          .num_drafts = num_drafts};
  };
  std::vector<std::vector<int32_t>> out;
  const ProposeRequest a = request(0, split, 0);
  p.propose({&a, 1}, out);
  EXPECT_TRUE(out.at(0).empty());
  const ProposeRequest b = request(split, n() - split, int64_t(drafts_.size()));
  p.propose({&b, 1}, out);
  EXPECT_EQ(out.at(0), drafts_);
  ASSERT_EQ(p.last_logits().at(0).size(), logits_.size());
  for (size_t k = 0; k < drafts_.size(); ++k) {
    const float* want = &logits_[k * size_t(vocab())];
    // The C++ target's states differ from the reference's by summation order: 10x the bound.
    EXPECT_LT(max_diff(&p.last_logits()[0][k * size_t(vocab())], want, vocab()), 10 * tolerance(want, vocab())) << k;
  }

  // Feeding the state BEFORE the final norm (the other reading of "the last hidden state")
  // moves the logits far from the reference: the choice is tested.
  MtpLayer layer(model_dir_, model_->config(), kNumBlocks, kBlockSize, &model_->weights().embed);
  const std::span<const int32_t> first(tokens_.begin() + 1, tokens_.end());
  const MtpSequence raw{.tokens = first, .hidden = r.hidden_states, .first_position = 0, .block_ids = kBlocks};
  const MtpOutput o = layer.forward(model_->pool(), {&raw, 1});
  EXPECT_GT(max_diff(o.logits.data(), logits_.data(), vocab()), 100 * tolerance(logits_.data(), vocab()));
}

TEST_F(MtpGolden, BatchedRowsEqualSingleRows) {
  // Two sequences in one forward (different blocks) give each one's logits as alone.
  MtpLayer alone(model_dir_, model_->config(), kNumBlocks, kBlockSize, &model_->weights().embed);
  MtpLayer both(model_dir_, model_->config(), kNumBlocks, kBlockSize, &model_->weights().embed);
  const std::span<const int32_t> first(tokens_.begin() + 1, tokens_.end());
  const std::vector<int32_t> other_blocks = {1, 2, 4, 5};
  const std::span<const int32_t> shorter = first.first(7);
  const MtpSequence s0{.tokens = first, .hidden = hprev_, .first_position = 0, .block_ids = kBlocks};
  const MtpSequence s1{.tokens = shorter,
                       .hidden = std::span<const float>(hprev_).first(size_t(7 * hidden())),
                       .first_position = 0,
                       .block_ids = other_blocks};
  const MtpOutput a0 = alone.forward(model_->pool(), {&s0, 1});
  const MtpOutput a1 = alone.forward(model_->pool(), {&s1, 1});
  const MtpSequence pair[] = {s0, s1};
  const MtpOutput b = both.forward(model_->pool(), pair);
  EXPECT_LT(max_diff(b.logits.data(), a0.logits.data(), vocab()), tolerance(a0.logits.data(), vocab()));
  EXPECT_LT(max_diff(b.logits.data() + vocab(), a1.logits.data(), vocab()), tolerance(a1.logits.data(), vocab()));
  EXPECT_EQ(b.argmax, (std::vector<int32_t>{a0.argmax[0], a1.argmax[0]}));
}

TEST_F(MtpGolden, WithoutItsOwnEmbeddingTheLayerSharesTheTargets) {
  // The same checkpoint without model.layers.<L>.embed_tokens.weight (a copy of the target's).
  const ModelConfig& c = model_->config();
  const std::string own = layer_tensor(c, c.num_hidden_layers, "embed_tokens.weight");
  const Checkpoint ck(model_dir_);
  std::vector<TensorSpec> specs;
  for (const std::string& name : ck.names()) {
    if (name == own) continue;
    const TensorView* t = ck.find(name);
    specs.push_back({name, t->dtype, t->shape, [t](std::span<std::byte> out) {
                       std::copy(t->data.begin(), t->data.end(), out.begin());
                     }});
  }
  const auto dir = dir_->path() / "no-embed";
  write_sharded_checkpoint(dir, specs, size_t(1) << 30);
  std::filesystem::copy_file(model_dir_ / "config.json", dir / "config.json");
  ASSERT_EQ(Checkpoint(dir).find(own), nullptr);
  MtpLayer shared(dir, c, kNumBlocks, kBlockSize, &model_->weights().embed);
  std::vector<int32_t> drafts;
  const std::vector<float> got = layer_chain(shared, drafts);
  EXPECT_EQ(drafts, drafts_);
  for (size_t k = 0; k < drafts_.size(); ++k)
    EXPECT_LT(max_diff(&got[k * size_t(vocab())], &logits_[k * size_t(vocab())], vocab()),
              tolerance(&logits_[k * size_t(vocab())], vocab()));
  const std::string err = test::error_of([&] { MtpLayer alone(dir, c, kNumBlocks, kBlockSize); });
  EXPECT_NE(err.find("no usable target embedding"), std::string::npos) << err;
}

TEST(MtpErrors, ACheckpointWithoutTheLayerIsAClearError) {
  test::TempDir dir;
  const auto plain = test::make_tiny_model(dir, "plain");
  const ModelConfig c = ModelConfig::load(plain);
  const std::string err = test::error_of([&] {
    spec::check_against_target(spec::parse_speculative_config(R"({"method":"deepseek_mtp","num_speculative_tokens":2})"), c);
  });
  EXPECT_NE(err.find("needs a checkpoint with an MTP layer"), std::string::npos) << err;
  // A config that claims the layer while the weights lack it.
  ModelConfig claims = c;
  claims.num_nextn_predict_layers = 1;
  const std::string err2 = test::error_of([&] { MtpLayer layer(plain, claims, 4, 4); });
  EXPECT_NE(err2.find("no MTP layer weights"), std::string::npos) << err2;
  EXPECT_NO_THROW(
      spec::check_against_target(spec::parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":5})"),
                                 ModelConfig::load(test::make_tiny_model(dir, "mtp", with_mtp()))));
}

}  // namespace
}  // namespace kimi
