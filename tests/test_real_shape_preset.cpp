// The kimi-k2.5 make-model preset (the real model's shapes, cut to a few layers and experts) and
// its --num-layers / --num-experts overrides: the config it writes and the tensors' names, dtypes
// and shapes, checked on the plan, without generating or writing its gigabytes.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "common/dtype.h"
#include "common/error.h"
#include "format/model_config.h"
#include "modelgen/make_model.h"
#include "test_util.h"

namespace kimi {
namespace {

MakeModelOptions real(int64_t layers, int64_t experts, QuantPreset quant) {
  MakeModelOptions o;
  o.preset = "kimi-k2.5";
  o.num_layers = layers;
  o.num_experts = experts;
  o.quant = quant;
  return o;
}

std::map<std::string, const TensorSpec*> by_name(const MakeModelPlan& p) {
  std::map<std::string, const TensorSpec*> m;
  for (const TensorSpec& s : p.specs) m[s.name] = &s;
  return m;
}

TEST(RealShapePreset, ConfigHasKimiK25Dimensions) {
  const MakeModelPlan p = plan_model(real(2, 8, QuantPreset::Int4));
  const nlohmann::json& t = p.config["text_config"];
  EXPECT_EQ(t["hidden_size"], 7168);
  EXPECT_EQ(t["num_attention_heads"], 64);
  EXPECT_EQ(t["num_key_value_heads"], 64);
  EXPECT_EQ(t["q_lora_rank"], 1536);
  EXPECT_EQ(t["kv_lora_rank"], 512);
  EXPECT_EQ(t["qk_nope_head_dim"], 128);
  EXPECT_EQ(t["qk_rope_head_dim"], 64);
  EXPECT_EQ(t["v_head_dim"], 128);
  EXPECT_EQ(t["moe_intermediate_size"], 2048);
  EXPECT_EQ(t["intermediate_size"], 18432);
  EXPECT_EQ(t["vocab_size"], 163840);
  EXPECT_EQ(t["num_experts_per_tok"], 8);
  EXPECT_EQ(t["n_shared_experts"], 1);
  EXPECT_EQ(t["first_k_dense_replace"], 1);
  EXPECT_EQ(t["n_group"], 1);
  EXPECT_EQ(t["bos_token_id"], 163584);
  EXPECT_EQ(t["eos_token_id"], 163585);
  EXPECT_EQ(t["pad_token_id"], 163839);
  // The overrides.
  EXPECT_EQ(t["num_hidden_layers"], 2);
  EXPECT_EQ(t["n_routed_experts"], 8);
  // The release's quantization_config, at the top level and in text_config.
  EXPECT_EQ(p.config["quantization_config"]["quant_method"], "compressed-tensors");
  EXPECT_EQ(t["quantization_config"], p.config["quantization_config"]);
  // It parses as the engine reads it.
  const ModelConfig mc = ModelConfig::from_json(p.config, "plan");
  EXPECT_EQ(mc.num_hidden_layers, 2);
  EXPECT_EQ(mc.n_routed_experts, 8);
}

TEST(RealShapePreset, WithoutOverridesIsTheFullModel) {
  const MakeModelPlan p = plan_model(real(0, 0, QuantPreset::None));
  EXPECT_EQ(p.config["text_config"]["num_hidden_layers"], 61);
  EXPECT_EQ(p.config["text_config"]["n_routed_experts"], 384);
  // ~1.03 T parameters, as published.
  EXPECT_GT(p.result.num_parameters, int64_t(1'000'000'000'000));
  EXPECT_LT(p.result.num_parameters, int64_t(1'100'000'000'000));
}

TEST(RealShapePreset, Int4LayoutIsTheReleases) {
  const MakeModelPlan p = plan_model(real(2, 8, QuantPreset::Int4));
  const auto m = by_name(p);
  const std::string L1 = "language_model.model.layers.1.";
  // Routed experts: compressed-tensors pack-quantized, group 32.
  for (const char* proj : {"gate_proj", "up_proj"}) {
    const std::string e = L1 + "mlp.experts.7." + proj;
    ASSERT_TRUE(m.count(e + ".weight_packed")) << e;
    EXPECT_EQ(m.at(e + ".weight_packed")->dtype, DType::I32);
    EXPECT_EQ(m.at(e + ".weight_packed")->shape, (std::vector<int64_t>{2048, 7168 / 8}));
    EXPECT_EQ(m.at(e + ".weight_scale")->dtype, DType::BF16);
    EXPECT_EQ(m.at(e + ".weight_scale")->shape, (std::vector<int64_t>{2048, 7168 / 32}));
    EXPECT_EQ(m.at(e + ".weight_shape")->shape, (std::vector<int64_t>{2}));
    EXPECT_FALSE(m.count(e + ".weight"));
  }
  const std::string down = L1 + "mlp.experts.0.down_proj";
  EXPECT_EQ(m.at(down + ".weight_packed")->shape, (std::vector<int64_t>{7168, 2048 / 8}));
  EXPECT_EQ(m.at(down + ".weight_scale")->shape, (std::vector<int64_t>{7168, 2048 / 32}));
  EXPECT_FALSE(m.count(L1 + "mlp.experts.8.down_proj.weight_packed"));  // only 8 experts
  // Everything else stays BF16 (router bias F32).
  const std::map<std::string, std::vector<int64_t>> bf16 = {
      {"language_model.model.embed_tokens.weight", {163840, 7168}},
      {"language_model.lm_head.weight", {163840, 7168}},
      {"language_model.model.layers.0.mlp.gate_proj.weight", {18432, 7168}},
      {"language_model.model.layers.0.mlp.down_proj.weight", {7168, 18432}},
      {L1 + "mlp.shared_experts.up_proj.weight", {2048, 7168}},
      {L1 + "mlp.gate.weight", {8, 7168}},
      {L1 + "self_attn.q_a_proj.weight", {1536, 7168}},
      {L1 + "self_attn.q_b_proj.weight", {64 * 192, 1536}},
      {L1 + "self_attn.kv_a_proj_with_mqa.weight", {576, 7168}},
      {L1 + "self_attn.kv_b_proj.weight", {64 * 256, 512}},
      {L1 + "self_attn.o_proj.weight", {7168, 64 * 128}},
  };
  for (const auto& [name, shape] : bf16) {
    ASSERT_TRUE(m.count(name)) << name;
    EXPECT_EQ(m.at(name)->dtype, DType::BF16) << name;
    EXPECT_EQ(m.at(name)->shape, shape) << name;
  }
  EXPECT_EQ(m.at(L1 + "mlp.gate.e_score_correction_bias")->dtype, DType::F32);
  EXPECT_EQ(m.at(L1 + "mlp.gate.e_score_correction_bias")->shape, (std::vector<int64_t>{8}));
  EXPECT_FALSE(m.count("language_model.model.layers.2.self_attn.o_proj.weight"));  // only 2 layers
}

// The direct INT4 codes: never -8 (symmetric, as quantize_int4_symmetric writes), all others seen,
// and scales of the float init's magnitude.
TEST(RealShapePreset, DirectInt4CodesAreSymmetric) {
  const MakeModelPlan p = plan_model(real(2, 8, QuantPreset::Int4));
  const auto m = by_name(p);
  const TensorSpec& packed = *m.at("language_model.model.layers.1.mlp.experts.3.down_proj.weight_packed");
  std::vector<std::byte> buf(size_t(7168) * 2048 / 2);
  packed.fill(buf);
  std::array<int64_t, 16> seen{};
  for (std::byte b : buf) {
    ++seen[size_t(uint8_t(b) & 0xF)];
    ++seen[size_t(uint8_t(b) >> 4)];
  }
  EXPECT_EQ(seen[0], 0);  // nibble 0 is code -8
  for (size_t v = 1; v < 16; ++v) EXPECT_GT(seen[v], int64_t(buf.size()) / 16) << v;
  const TensorSpec& scale = *m.at("language_model.model.layers.1.mlp.experts.3.down_proj.weight_scale");
  std::vector<std::byte> sbuf(size_t(7168) * 64 * 2);
  scale.fill(sbuf);
  uint16_t s0 = 0;
  std::memcpy(&s0, sbuf.data(), 2);
  EXPECT_NEAR(bf16_to_f32(s0), std::sqrt(3.0 / 2048) / 7, 1e-4);
}

TEST(RealShapePreset, OverridesAreValidated) {
  EXPECT_THROW(plan_model(real(-1, 0, QuantPreset::None)), Error);
  EXPECT_THROW(plan_model(real(2, 7, QuantPreset::None)), Error);   // fewer than top-8
  EXPECT_THROW(plan_model(real(2, -4, QuantPreset::None)), Error);
  EXPECT_NO_THROW(plan_model(real(1, 8, QuantPreset::None)));      // the dense layer alone
  // tiny has 4 routing groups picking from 2: 6 experts is not a multiple of 4, 4 leaves 1 per group.
  MakeModelOptions tiny;
  tiny.num_experts = 6;
  EXPECT_THROW(plan_model(tiny), Error);
  tiny.num_experts = 4;
  EXPECT_THROW(plan_model(tiny), Error);
  tiny.num_experts = 8;
  EXPECT_NO_THROW(plan_model(tiny));
}

// The flags are checked before anything is written.
TEST(RealShapePresetCli, RejectsBadFlags) {
  test::TempDir d;
  const std::string out = (d.path() / "m").string();
  for (const char* bad : {"--num-layers 0", "--num-layers -2", "--num-experts 0", "--num-experts 7"}) {
    const test::CmdResult r = test::run_kimi("make-model " + out + " --preset kimi-k2.5 " + bad);
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_NE(r.out.find("num-"), std::string::npos) << bad << ": " << r.out;
    EXPECT_FALSE(std::filesystem::exists(d.path() / "m" / "config.json")) << bad;
  }
  EXPECT_NE(test::run_kimi("bench latency --model " + out + " --breakdown --quantization none,int4").status, 0);
  EXPECT_NE(test::run_kimi("bench latency --model " + out + " --batch 8").status, 0);
}

// The overrides on a small preset end to end, then bench latency --breakdown on it.
TEST(RealShapePresetCli, OverridesThenBreakdown) {
  test::TempDir d;
  const std::string out = (d.path() / "m").string();
  const test::CmdResult made = test::run_kimi("make-model " + out + " --preset tiny --num-layers 2 --num-experts 8");
  ASSERT_EQ(made.status, 0) << made.out;
  std::ifstream f(d.path() / "m" / "config.json");
  const nlohmann::json c = nlohmann::json::parse(f);
  EXPECT_EQ(c["text_config"]["num_hidden_layers"], 2);
  EXPECT_EQ(c["text_config"]["n_routed_experts"], 8);
  const test::CmdResult r = test::run_kimi("bench latency --model " + out + " --input-len 8 --output-len 8 --num-iters 1 --threads 1 --breakdown --batch 1,4");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s : {"attention", "router", "routed experts", "shared expert", "dense MLP", "lm_head",
                        "extrapolated to Kimi-K2.5's 61 layers", "1 sequences", "4 sequences"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

}  // namespace
}  // namespace kimi
