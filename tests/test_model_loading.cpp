// Loading checkpoints in every published form, and clear errors for broken ones.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/error.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "model/tensor_layout.h"
#include "test_util.h"

namespace kimi {
namespace {

const std::vector<int32_t> kPrompt = {17, 923, 4, 511, 88, 1000, 250, 3, 77};

std::vector<float> last_logits(const std::filesystem::path& dir) {
  Model m(dir, ModelOptions{.num_threads = 1});
  KvCache cache = m.new_cache(int64_t(kPrompt.size()));
  return forward_sequence(m, kPrompt, cache);
}

using test::error_of;

std::vector<char> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(ModelLoading, MakeModelIsDeterministic) {
  test::TempDir d;
  const auto a = test::make_tiny_model(d, "a");
  const auto b = test::make_tiny_model(d, "b");
  MakeModelOptions other;
  other.seed = 1;
  const auto c = test::make_tiny_model(d, "c", other);
  EXPECT_EQ(read_file(a / "model.safetensors"), read_file(b / "model.safetensors"));
  EXPECT_NE(read_file(a / "model.safetensors"), read_file(c / "model.safetensors"));
}

TEST(ModelLoading, WritesThePublishedLayout) {
  test::TempDir d;
  const auto dir = test::make_tiny_model(d);
  const Checkpoint ckpt(dir);
  const ModelConfig c = ModelConfig::load(dir);
  EXPECT_EQ(size_t(ckpt.num_tensors()), text_model_layout(c).size());
  EXPECT_TRUE(ckpt.contains("language_model.model.layers.0.self_attn.kv_a_proj_with_mqa.weight"));
  EXPECT_TRUE(ckpt.contains("language_model.model.layers.1.mlp.experts.15.gate_proj.weight"));
  EXPECT_TRUE(ckpt.contains("language_model.model.layers.2.mlp.shared_experts.down_proj.weight"));
  EXPECT_TRUE(ckpt.contains("language_model.model.layers.0.mlp.gate_proj.weight"));  // dense layer 0
  EXPECT_FALSE(ckpt.contains("language_model.model.layers.0.mlp.gate.weight"));
  EXPECT_TRUE(ckpt.contains("language_model.lm_head.weight"));
  const TensorView& bias = ckpt.get("language_model.model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(bias.dtype, DType::F32);  // as in Kimi-K2.5, whatever the weights' dtype
  EXPECT_EQ(ckpt.get("language_model.model.layers.1.self_attn.q_b_proj.weight").dtype, DType::BF16);
}

TEST(ModelLoading, FlatAndShardedFormsGiveTheSameLogits) {
  test::TempDir d;
  const auto base = last_logits(test::make_tiny_model(d, "k25"));
  MakeModelOptions flat;
  flat.form = CheckpointForm::DeepseekV3;
  const auto flat_dir = test::make_tiny_model(d, "flat", flat);
  EXPECT_FALSE(Checkpoint(flat_dir).contains("language_model.lm_head.weight"));
  EXPECT_TRUE(Checkpoint(flat_dir).contains("lm_head.weight"));
  EXPECT_EQ(last_logits(flat_dir), base);

  MakeModelOptions sharded;
  sharded.max_shard_bytes = 100 * 1024;
  const auto sharded_dir = test::make_tiny_model(d, "sharded", sharded);
  EXPECT_TRUE(std::filesystem::exists(sharded_dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(sharded_dir / "model.safetensors"));
  EXPECT_EQ(last_logits(sharded_dir), base);
}

TEST(ModelLoading, F16AndF32CheckpointsAgreeWithBf16) {
  test::TempDir d;
  const auto base = last_logits(test::make_tiny_model(d, "bf16"));
  for (DType t : {DType::F16, DType::F32}) {
    MakeModelOptions o;
    o.dtype = t;
    const auto other = last_logits(test::make_tiny_model(d, std::string(dtype_name(t)), o));
    ASSERT_EQ(other.size(), base.size());
    // Same random values, rounded differently: close, but not identical.
    float max_diff = 0;
    for (size_t i = 0; i < base.size(); ++i) max_diff = std::max(max_diff, std::fabs(other[i] - base[i]));
    EXPECT_LT(max_diff, 0.25f) << dtype_name(t);
    EXPECT_GT(max_diff, 0.0f) << dtype_name(t);
  }
}

TEST(ModelLoading, MissingTensorIsNamed) {
  test::TempDir d;
  const auto dir = test::make_tiny_model(d);
  // Rewrite the checkpoint without one tensor.
  const std::string victim = "language_model.model.layers.2.mlp.experts.3.up_proj.weight";
  std::vector<TensorSpec> specs;
  {
    const SafetensorsFile f(dir / "model.safetensors");
    for (const auto& [name, t] : f.tensors()) {
      if (name == victim) continue;
      std::vector<std::byte> bytes(t.data.begin(), t.data.end());
      specs.push_back({name, t.dtype, t.shape, [bytes](std::span<std::byte> out) {
                         std::copy(bytes.begin(), bytes.end(), out.begin());
                       }});
    }
  }
  write_safetensors(dir / "model.safetensors", specs);
  const std::string err = error_of([&] { Model m(dir); });
  EXPECT_NE(err.find(victim), std::string::npos) << err;
  EXPECT_NE(err.find("not found"), std::string::npos) << err;
}

TEST(ModelLoading, ShapeMismatchNamesFileAndTensor) {
  test::TempDir d;
  const auto dir = test::make_tiny_model(d);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["text_config"]["kv_lora_rank"] = 40;  // the weights were written for 32
  std::ofstream(dir / "config.json") << cfg.dump();
  const std::string err = error_of([&] { Model m(dir); });
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("kv_a_proj_with_mqa"), std::string::npos) << err;
  EXPECT_NE(err.find("[40, 64]"), std::string::npos) << err;  // the expected shape
}

TEST(ModelLoading, BrokenFilesGiveClearErrors) {
  test::TempDir d;
  const auto dir = test::make_tiny_model(d);
  // Truncated weights.
  std::filesystem::resize_file(dir / "model.safetensors", std::filesystem::file_size(dir / "model.safetensors") - 100);
  std::string err = error_of([&] { Model m(dir); });
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  // Invalid config.json.
  std::ofstream(dir / "config.json") << "{\"text_config\": ";
  err = error_of([&] { Model m(dir); });
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  // Not a model directory at all.
  err = error_of([&] { Model m(d.path() / "nope"); });
  EXPECT_NE(err.find("nope"), std::string::npos) << err;
}

TEST(ModelLoading, OutOfRangeTokenAndFullCacheAreErrors) {
  test::TempDir d;
  Model m(test::make_tiny_model(d), ModelOptions{.num_threads = 1});
  KvCache cache = m.new_cache(4);
  const std::vector<int32_t> bad = {1, 5000};
  EXPECT_NE(error_of([&] { forward_sequence(m, bad, cache); }).find("5000"), std::string::npos);
  const std::vector<int32_t> many = {1, 2, 3, 4, 5};
  EXPECT_NE(error_of([&] { forward_sequence(m, many, cache); }).find("capacity"), std::string::npos);
  EXPECT_EQ(cache.length(), 0);  // nothing half-written counts as cached
}

}  // namespace
}  // namespace kimi
