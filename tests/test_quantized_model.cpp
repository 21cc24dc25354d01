// Quantized checkpoints: the compressed-tensors INT4 layout of the official release, msModelSlim
// W4A8/W8A8, quantization on load, and what each does to the logits of the same random model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/error.h"
#include "format/quantization_config.h"
#include "format/safetensors.h"
#include "kernels/cpu_features.h"
#include "kernels/quantize.h"
#include "model/model.h"
#include "test_util.h"

namespace kimi {
namespace {

const std::vector<int32_t> kPrompt = {17, 923, 4, 511, 88, 1000, 250, 3, 77, 640, 12, 5};
const std::string kExpert = "language_model.model.layers.1.mlp.experts.5.up_proj";  // [32, 64] in tiny

std::vector<float> logits_of(const std::filesystem::path& dir, const std::string& quantization = "") {
  ModelOptions o;
  o.num_threads = 1;
  o.quantization = QuantizationRequest::parse(quantization);
  Model m(dir, o);
  KvCache cache = m.new_cache(int64_t(kPrompt.size()));
  return forward_sequence(m, kPrompt, cache, /*all_logits=*/true);
}

std::filesystem::path make(const test::TempDir& d, const std::string& quant) {
  MakeModelOptions o;
  if (!quant.empty()) o.quant = parse_quant_preset(quant);
  return test::make_tiny_model(d, quant.empty() ? "bf16" : quant, o);
}

// RMS of (a - b) relative to the RMS of b over every logit of every position. (The largest single
// difference is a poor measure here: a rounding change can flip one token's expert choice in a
// random model, which moves that position's logits a lot while the rest stay put.)
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += double(a[i] - b[i]) * double(a[i] - b[i]);
    scale += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff / scale);
}

using test::error_of;

const WeightMatrix& expert_up(const Model& m, int layer, int expert) {
  return m.weights().layers[size_t(layer)].moe->experts[size_t(expert)].up;
}

// Rewrites a checkpoint file, letting `edit` change the list of tensors.
void rewrite(const std::filesystem::path& file, const std::function<void(std::vector<TensorSpec>&)>& edit) {
  std::vector<TensorSpec> specs;
  {
    const SafetensorsFile f(file);
    for (const auto& [name, t] : f.tensors()) {
      std::vector<std::byte> bytes(t.data.begin(), t.data.end());
      specs.push_back({name, t.dtype, t.shape, [bytes](std::span<std::byte> out) {
                         std::copy(bytes.begin(), bytes.end(), out.begin());
                       }});
    }
  }
  edit(specs);
  write_safetensors(file, specs);
}

TEST(QuantizationConfig, KimiInt4ConfigQuantizesOnlyRoutedExperts) {
  const auto c = CompressedTensorsConfig::parse(CompressedTensorsConfig::kimi_k25_int4_json(), "test");
  const auto s = c.scheme_for("language_model.model.layers.7.mlp.experts.300.down_proj");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->bits, 4);
  EXPECT_TRUE(s->symmetric);
  EXPECT_EQ(s->group_size, 32);
  EXPECT_FALSE(s->dynamic_int8_activations);
  for (const char* m : {"language_model.model.layers.7.self_attn.q_a_proj", "language_model.model.layers.7.mlp.shared_experts.up_proj",
                        "language_model.model.layers.0.mlp.gate_proj", "language_model.lm_head"})
    EXPECT_FALSE(c.scheme_for(m)) << m;
}

TEST(QuantizationConfig, UnsupportedSchemesAreClearErrors) {
  auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = CompressedTensorsConfig::kimi_k25_int4_json();
    edit(j);
    return error_of([&] { CompressedTensorsConfig::parse(j, "cfg.json"); });
  };
  EXPECT_NE(with([](auto& j) { j["quant_method"] = "awq"; }).find("quant_method 'awq'"), std::string::npos);
  EXPECT_NE(with([](auto& j) { j["config_groups"]["group_0"]["weights"]["type"] = "float"; }).find("weight type 'float'"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) { j["config_groups"]["group_0"]["weights"]["group_size"] = 48; }).find("group_size 48"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) { j["config_groups"]["group_0"]["weights"]["actorder"] = "group"; }).find("actorder"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) { j["config_groups"]["group_0"]["weights"]["num_bits"] = 3; }).find("3-bit"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) { j["ignore"] = {"re:(unclosed"}; }).find("not a valid regex"), std::string::npos);
  nlohmann::json w8a8 = CompressedTensorsConfig::kimi_k25_int4_json();
  w8a8["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"dynamic", true}};
  EXPECT_TRUE(CompressedTensorsConfig::parse(w8a8, "cfg.json").scheme_for(kExpert)->dynamic_int8_activations);
}

TEST(QuantizedModel, MakeModelInt4WritesTheReleaseLayout) {
  test::TempDir d;
  const auto dir = make(d, "int4");
  const SafetensorsFile f(dir / "model.safetensors");
  const TensorView* packed = f.find(kExpert + ".weight_packed");
  ASSERT_TRUE(packed);
  EXPECT_EQ(packed->dtype, DType::I32);
  EXPECT_EQ(packed->shape, (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(f.find(kExpert + ".weight_scale")->dtype, DType::BF16);
  EXPECT_EQ(f.find(kExpert + ".weight_scale")->shape, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(f.find(kExpert + ".weight_shape")->dtype, DType::I32);
  EXPECT_FALSE(f.find(kExpert + ".weight"));
  // Everything the release keeps in BF16 stays so.
  EXPECT_EQ(f.find("language_model.model.layers.1.mlp.shared_experts.up_proj.weight")->dtype, DType::BF16);
  EXPECT_EQ(f.find("language_model.model.layers.1.self_attn.q_a_proj.weight")->dtype, DType::BF16);
  const auto cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  EXPECT_EQ(cfg["quantization_config"]["format"], "pack-quantized");
  EXPECT_EQ(cfg["text_config"]["quantization_config"], cfg["quantization_config"]);

  Model m(dir);
  const WeightMatrix& w = expert_up(m, 1, 5);
  EXPECT_EQ(w.format, WeightFormat::Int4Group);
  EXPECT_EQ(w.group_size, 32);
  // The published int4 layout is multiplied in place from the mapped file, not copied.
  for (const auto& buffer : m.weights().buffers)
    EXPECT_FALSE(w.data >= buffer.data() && w.data < buffer.data() + buffer.size());
  EXPECT_EQ(m.weights().layers[1].attn.q_a.format, WeightFormat::Dense);
}

// The stored INT4 checkpoint and the BF16 one quantized on load are the same numbers.
TEST(QuantizedModel, StoredInt4EqualsInt4QuantizedOnLoad) {
  test::TempDir d;
  const auto stored = logits_of(make(d, "int4"));
  const auto on_load = logits_of(make(d, ""), "int4");
  ASSERT_EQ(stored.size(), on_load.size());
  EXPECT_EQ(relative_error(stored, on_load), 0.0);
}

// The file holds compressed-tensors' quantization of the float model's weights, and the loader
// decodes it as the format says: word i/8, bits 4*(i%8), minus 8, times the group's BF16 scale.
TEST(QuantizedModel, StoredInt4IsTheFloatWeightsQuantizedAndDecodesAsSpecified) {
  test::TempDir d;
  const auto dir = make(d, "int4");
  const SafetensorsFile f(dir / "model.safetensors");
  const TensorView& words = *f.find(kExpert + ".weight_packed");
  const TensorView& scale = *f.find(kExpert + ".weight_scale");
  {
    Model float_model(make(d, ""));
    const WeightMatrix& w = expert_up(float_model, 1, 5);
    std::vector<float> wf(size_t(w.rows * w.cols));
    for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w, r, &wf[size_t(r * w.cols)]);
    std::vector<uint8_t> packed(size_t(w.rows * w.cols / 2));
    std::vector<uint16_t> scales(size_t(w.rows * w.cols / 32));
    quantize_int4_symmetric(wf.data(), w.rows, w.cols, 32, packed.data(), scales.data());
    EXPECT_EQ(std::memcmp(packed.data(), words.data.data(), packed.size()), 0);
    EXPECT_EQ(std::memcmp(scales.data(), scale.data.data(), scales.size() * 2), 0);
  }
  Model m(dir);
  const WeightMatrix& w = expert_up(m, 1, 5);
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t i = 0; i < w.cols; ++i) {
      uint32_t word;
      std::memcpy(&word, words.data.data() + 4 * (r * w.cols / 8 + i / 8), 4);
      uint16_t s;
      std::memcpy(&s, scale.data.data() + 2 * (r * w.cols / 32 + i / 32), 2);
      const int q = int((word >> (4 * (i % 8))) & 0xF) - 8;
      ASSERT_EQ(row[size_t(i)], float(q) * bf16_to_f32(s)) << "row " << r << " col " << i;
    }
  }
}

// Decodes msModelSlim's output-packed signed int4 straight from the file, independently of the
// loader's repacking, and compares with what the kernels see.
TEST(QuantizedModel, ModelSlimW4A8ExpertsDecodeAsStored) {
  test::TempDir d;
  const auto dir = make(d, "w4a8");
  const auto desc = ModelSlimDescription::load(dir);
  ASSERT_TRUE(desc);
  EXPECT_EQ(desc->model_quant_type(), "W4A8_DYNAMIC");
  EXPECT_EQ(desc->type_of(kExpert + ".weight"), "W4A8_DYNAMIC");
  EXPECT_EQ(desc->type_of("language_model.model.layers.1.self_attn.o_proj.weight"), "W8A8_DYNAMIC");
  EXPECT_EQ(desc->type_of("language_model.model.layers.1.self_attn.kv_b_proj.weight"), "FLOAT");

  const SafetensorsFile f(dir / "model.safetensors");
  const TensorView& q = *f.find(kExpert + ".weight");
  const TensorView& s = *f.find(kExpert + ".weight_scale");
  ASSERT_EQ(q.shape, (std::vector<int64_t>{16, 64}));
  Model m(dir);
  const WeightMatrix& w = expert_up(m, 1, 5);
  EXPECT_EQ(w.format, WeightFormat::Int4Group);
  EXPECT_EQ(w.act_quant, ActivationQuant::Int8PerToken);
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    float scale;
    std::memcpy(&scale, s.data.data() + 4 * r, 4);
    for (int64_t i = 0; i < w.cols; ++i) {
      const auto byte = uint8_t(q.data[size_t((r / 2) * w.cols + i)]);
      int v = (r % 2 ? byte >> 4 : byte) & 0xF;
      if (v >= 8) v -= 16;
      ASSERT_EQ(row[size_t(i)], float(v) * scale) << "row " << r << " col " << i;
    }
  }
  EXPECT_EQ(m.weights().layers[1].attn.o.format, WeightFormat::Int8Group);
  EXPECT_EQ(m.weights().layers[1].attn.kv_b.format, WeightFormat::Dense);
}

// What quantization costs in accuracy on the tiny random model (every position's logits, RMS).
// Observed: int4 (group 32) 7.3%, w4a8 8.9% (stored, per-channel experts) / 7.6% (on load,
// group 32), w8a8 5.1% (most positions 1-4%; one token's expert choice flips). Int4's figure is
// the weights' own rounding error (uniform weights, absmax / 7.5 steps: ~6.7%). The bounds leave
// room for ISA differences but catch a wrong scale, nibble order or zero point (errors >= 50%).
TEST(QuantizedModel, LogitsStayCloseToTheFloatModel) {
  test::TempDir d;
  const auto bf16_dir = make(d, "");
  const auto base = logits_of(bf16_dir);
  struct Case {
    std::string what;
    std::vector<float> logits;
    double bound;
  };
  const std::vector<Case> cases = {
      {"int4 stored", logits_of(make(d, "int4")), 0.12},
      {"w4a8 stored", logits_of(make(d, "w4a8")), 0.15},
      {"w8a8 stored", logits_of(make(d, "w8a8")), 0.08},
      {"w4a8 on load", logits_of(bf16_dir, "w4a8"), 0.12},
      {"w8a8 on load", logits_of(bf16_dir, "w8a8"), 0.08},
  };
  for (const Case& c : cases) {
    ASSERT_EQ(c.logits.size(), base.size()) << c.what;
    const double e = relative_error(c.logits, base);
    EXPECT_LT(e, c.bound) << c.what;
    EXPECT_GT(e, 1e-5) << c.what << ": quantization changed nothing";
    std::printf("[ quantized ] %-13s RMS logit error / RMS logit = %.4f\n", c.what.c_str(), e);
  }
}

TEST(QuantizedModel, Int4CheckpointRunsWithInt8ActivationsOnRequest) {
  test::TempDir d;
  const auto dir = make(d, "int4");
  ModelOptions o;
  o.quantization = QuantizationRequest::parse("w4a8");
  Model m(dir, o);
  const WeightMatrix& w = expert_up(m, 1, 5);
  EXPECT_EQ(w.format, WeightFormat::Int4Group);
  EXPECT_EQ(w.act_quant, ActivationQuant::Int8PerToken);
  EXPECT_EQ(m.weights().layers[1].attn.o.format, WeightFormat::Int8Group);  // float linears quantized on load
  EXPECT_GT(relative_error(logits_of(dir, "w4a8"), logits_of(dir)), 1e-5);
}

// `--dtype bfloat16`: the BF16 linears take bf16 activations (lm_head included), kv_b_proj (the
// absorbed attention's f32 matrix), the router and integer experts keep theirs; the logits move
// by about bf16's rounding, not more. A float16 request is refused.
TEST(QuantizedModel, Bf16ActivationsOnRequest) {
  test::TempDir d;
  const auto bf16_dir = make(d, "");
  const auto int4_dir = make(d, "int4");
  ModelOptions o;
  o.num_threads = 1;
  o.quantization.activations = ActivationDtype::BFloat16;
  Model m(int4_dir, o);
  EXPECT_EQ(m.weights().layers[1].attn.o.act_quant, ActivationQuant::Bf16);
  EXPECT_EQ(m.weights().lm_head.act_quant, ActivationQuant::Bf16);
  EXPECT_EQ(m.weights().layers[1].attn.kv_b.act_quant, ActivationQuant::None);
  EXPECT_EQ(expert_up(m, 1, 5).act_quant, ActivationQuant::Bf16);  // int4 (W4A16): bf16 too
  EXPECT_NE(m.weights().storage.find("BF16 linears with bf16 activations"), std::string::npos) << m.weights().storage;
  EXPECT_NE(m.weights().storage.find("INT4 linears with 16-bit activations"), std::string::npos) << m.weights().storage;

  // The INT4 model's logits move by the activations' rounding only.
  {
    ModelOptions f32_acts = o;
    f32_acts.quantization.activations = ActivationDtype::Float32;
    Model im(int4_dir, f32_acts);
    KvCache c32 = im.new_cache(int64_t(kPrompt.size())), c16 = m.new_cache(int64_t(kPrompt.size()));
    const std::vector<float> want = forward_sequence(im, kPrompt, c32, /*all_logits=*/true);
    const double e4 = relative_error(forward_sequence(m, kPrompt, c16, /*all_logits=*/true), want);
    EXPECT_LT(e4, 0.03);
    EXPECT_GT(e4, 1e-6) << "bf16 activations changed nothing in the INT4 model";
    std::printf("[ quantized ] int4 bf16 act RMS logit error / RMS logit = %.4f\n", e4);
  }

  Model bm(bf16_dir, o);
  KvCache cache = bm.new_cache(int64_t(kPrompt.size()));
  const std::vector<float> logits = forward_sequence(bm, kPrompt, cache, /*all_logits=*/true);
  const double e = relative_error(logits, logits_of(bf16_dir));
  EXPECT_LT(e, 0.03);
  EXPECT_GT(e, 1e-6) << "bf16 activations changed nothing";
  std::printf("[ quantized ] bf16 act      RMS logit error / RMS logit = %.4f\n", e);

  EXPECT_EQ(QuantizationRequest::parse_activation_dtype("auto"), ActivationDtype::Auto);
  EXPECT_EQ(QuantizationRequest::parse_activation_dtype(""), ActivationDtype::Auto);
  EXPECT_EQ(QuantizationRequest::parse_activation_dtype("float32"), ActivationDtype::Float32);
  EXPECT_EQ(QuantizationRequest::parse_activation_dtype("BFloat16"), ActivationDtype::BFloat16);
  EXPECT_THROW(QuantizationRequest::parse_activation_dtype("float16"), Error);
  EXPECT_THROW(QuantizationRequest::parse_activation_dtype("int8"), Error);
}

// `--dtype auto` follows the checkpoint's bfloat16 where 16-bit activations are faster: the BF16
// linears where the CPU multiplies bf16 (AVX512_BF16), the INT4 ones there and on AVX2 (the int16
// kernel); f32 elsewhere. An explicit dtype is never overridden.
TEST(QuantizedModel, AutoDtypeFollowsCheckpointWhereFaster) {
  ModelConfig bf16_ckpt, f32_ckpt, unsaid;
  bf16_ckpt.torch_dtype = "bfloat16";
  f32_ckpt.torch_dtype = "float32";
  const auto plan = [](const std::string& dtype, const ModelConfig& c, bool bf16_dot, bool int16_int4) {
    const ActivationPlan p = QuantizationRequest::parse("", dtype).activation_plan(c, bf16_dot, int16_int4);
    return std::pair{p.bf16_linears, p.int4_linears};
  };
  using P = std::pair<bool, bool>;
  EXPECT_EQ(plan("auto", bf16_ckpt, true, false), P(true, true));     // AVX512_BF16
  EXPECT_EQ(plan("auto", bf16_ckpt, false, true), P(false, true));    // AVX2
  EXPECT_EQ(plan("auto", bf16_ckpt, false, false), P(false, false));  // AVX-512 without BF16, scalar
  EXPECT_EQ(plan("auto", f32_ckpt, true, true), P(false, false));
  EXPECT_EQ(plan("auto", unsaid, true, true), P(false, false));
  EXPECT_EQ(plan("float32", bf16_ckpt, true, true), P(false, false));
  EXPECT_EQ(plan("bfloat16", f32_ckpt, false, false), P(true, true));

  // Loaded: the model and its weights agree on what auto became on this CPU (run again under
  // KIMI_MAX_CPU_ISA=avx2 by ctest).
  test::TempDir d;
  const auto int4_dir = make(d, "int4");
  ModelOptions o;
  o.num_threads = 1;
  o.quantization = QuantizationRequest::parse("", "auto");
  const bool bf16_dot = cpu_features().avx512_bf16, int4_16 = bf16_dot || best_isa() == Isa::Avx2;
  {
    Model m(int4_dir, o);
    EXPECT_EQ(m.config().torch_dtype, "bfloat16");
    EXPECT_EQ(m.bf16_activations(), bf16_dot);
    EXPECT_EQ(m.activation_plan().int4_linears, int4_16);
    EXPECT_EQ(m.weights().lm_head.act_quant, bf16_dot ? ActivationQuant::Bf16 : ActivationQuant::None);
    EXPECT_EQ(expert_up(m, 1, 5).act_quant, int4_16 ? ActivationQuant::Bf16 : ActivationQuant::None);
  }
  // A float32 checkpoint stays f32 everywhere.
  MakeModelOptions f32;
  f32.dtype = DType::F32;
  const auto f32_dir = test::make_tiny_model(d, "f32", f32);
  Model m(f32_dir, o);
  EXPECT_EQ(m.config().torch_dtype, "float32");
  EXPECT_FALSE(m.bf16_activations());
  EXPECT_EQ(m.weights().lm_head.act_quant, ActivationQuant::None);
}

TEST(QuantizedModel, AsymmetricGroupUsesItsZeroPoints) {
  test::TempDir d;
  const auto dir = make(d, "int4");
  // One module gets an asymmetric scheme of its own (an exact-name target beats "Linear").
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  nlohmann::json g = cfg["quantization_config"]["config_groups"]["group_0"];
  g["targets"] = {kExpert};
  g["weights"]["symmetric"] = false;
  cfg["quantization_config"]["config_groups"]["group_1"] = g;
  cfg["text_config"]["quantization_config"] = cfg["quantization_config"];
  std::ofstream(dir / "config.json") << cfg.dump();

  std::vector<float> w(32 * 64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.3f + 0.01f * float(i % 37);  // all positive: zero point != 8
  std::vector<uint8_t> packed(32 * 32), zp(32 * 2);
  std::vector<uint16_t> scales(32 * 2);
  quantize_int4_asymmetric(w.data(), 32, 64, 32, packed.data(), scales.data(), zp.data());
  std::vector<uint32_t> zp_packed(4 * 2, 0);  // [ceil(32/8), groups], packed along the rows
  for (int r = 0; r < 32; ++r)
    for (int gi = 0; gi < 2; ++gi) zp_packed[size_t((r / 8) * 2 + gi)] |= uint32_t(zp[size_t(r * 2 + gi)]) << (4 * (r % 8));
  rewrite(dir / "model.safetensors", [&](std::vector<TensorSpec>& specs) {
    for (TensorSpec& s : specs) {
      if (s.name == kExpert + ".weight_packed")
        s.fill = [&](std::span<std::byte> out) { std::memcpy(out.data(), packed.data(), packed.size()); };
      if (s.name == kExpert + ".weight_scale")
        s.fill = [&](std::span<std::byte> out) { std::memcpy(out.data(), scales.data(), scales.size() * 2); };
    }
    specs.push_back({kExpert + ".weight_zero_point", DType::I32, {4, 2}, [&](std::span<std::byte> out) {
                       std::memcpy(out.data(), zp_packed.data(), zp_packed.size() * 4);
                     }});
  });
  Model m(dir);
  const WeightMatrix& e = expert_up(m, 1, 5);
  ASSERT_NE(e.zero_points, nullptr);
  std::vector<float> row(64);
  for (int64_t r = 0; r < 32; ++r) {
    dequantize_row(e, r, row.data());
    for (int64_t i = 0; i < 64; ++i) {
      const float scale = bf16_to_f32(scales[size_t(r * 2 + i / 32)]);
      ASSERT_NEAR(row[size_t(i)], w[size_t(r * 64 + i)], scale / 2 + 1e-6f) << r << "," << i;
    }
  }
}

TEST(QuantizedModel, BrokenQuantizedCheckpointsGiveClearErrors) {
  test::TempDir d;
  {  // a missing scale tensor is named
    const auto dir = make(d, "int4");
    rewrite(dir / "model.safetensors", [](std::vector<TensorSpec>& specs) {
      std::erase_if(specs, [](const TensorSpec& s) { return s.name == kExpert + ".weight_scale"; });
    });
    const std::string err = error_of([&] { Model m(dir); });
    EXPECT_NE(err.find(kExpert + ".weight_scale"), std::string::npos) << err;
  }
  {  // weight_shape disagreeing with the config
    const auto dir = d.path() / "shape";
    make_model(dir, MakeModelOptions{.quant = QuantPreset::Int4});
    rewrite(dir / "model.safetensors", [](std::vector<TensorSpec>& specs) {
      for (TensorSpec& s : specs)
        if (s.name == kExpert + ".weight_shape")
          s.fill = [](std::span<std::byte> out) {
            const int32_t bad[2] = {32, 56};
            std::memcpy(out.data(), bad, sizeof bad);
          };
    });
    const std::string err = error_of([&] { Model m(dir); });
    EXPECT_NE(err.find("weight_shape"), std::string::npos) << err;
  }
  {  // an msModelSlim type this engine does not run
    const auto dir = make(d, "w8a8");
    nlohmann::json desc = nlohmann::json::parse(std::ifstream(dir / ModelSlimDescription::kFileName));
    desc[kExpert + ".weight"] = "W4A4_FLATQUANT";
    std::ofstream(dir / ModelSlimDescription::kFileName) << desc.dump();
    const std::string err = error_of([&] { Model m(dir); });
    EXPECT_NE(err.find("W4A4_FLATQUANT"), std::string::npos) << err;
  }
  {  // asking for a stored format the checkpoint does not have
    const auto dir = make(d, "");
    ModelOptions o;
    o.quantization = QuantizationRequest::parse("compressed-tensors");
    EXPECT_NE(error_of([&] { Model m(dir, o); }).find("no compressed-tensors"), std::string::npos);
    EXPECT_NE(error_of([] { QuantizationRequest::parse("fp3"); }).find("unknown quantization 'fp3'"), std::string::npos);
  }
  {  // integer tensors without any description
    const auto dir = make(d, "int4");
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    cfg.erase("quantization_config");
    cfg["text_config"].erase("quantization_config");
    std::ofstream(dir / "config.json") << cfg.dump();
    const std::string err = error_of([&] { Model m(dir); });
    EXPECT_NE(err.find("not found"), std::string::npos) << err;  // up_proj.weight: the float name is absent
  }
}

}  // namespace
}  // namespace kimi
