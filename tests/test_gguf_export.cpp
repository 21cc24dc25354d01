// `kimi export-gguf`: the GGUF container read back by a small reader written here from the
// format's description (not sharing the writer's code), and the deepseek2 export of the tiny
// model checked tensor by tensor against the checkpoint, including the kv_b split recomputed
// element by element.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "format/checkpoint.h"
#include "export/gguf_deepseek2.h"
#include "format/gguf_writer.h"
#include "format/model_config.h"
#include "model/tensor_layout.h"
#include "test_util.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace kimi;

namespace {

// --- an independent GGUF v3 reader ------------------------------------------------------------

struct Info {
  uint32_t type = 0;
  std::vector<uint64_t> ne;
  uint64_t offset = 0;
};

using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string>;
struct KvValue {
  uint32_t type = 0;
  Scalar scalar;
  uint32_t elem_type = 0;
  std::vector<Scalar> array;
};

struct Parsed {
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  std::vector<std::string> kv_order;
  std::map<std::string, KvValue> kv;
  std::vector<std::string> tensor_order;
  std::map<std::string, Info> tensors;
  uint64_t data_start = 0;
  std::vector<char> bytes;

  const std::byte* data(const std::string& name) const {
    return reinterpret_cast<const std::byte*>(bytes.data() + data_start + tensors.at(name).offset);
  }
};

class Cursor {
 public:
  explicit Cursor(const std::vector<char>& b) : b_(b) {}
  template <class T>
  T get() {
    if (pos_ + sizeof(T) > b_.size()) throw std::runtime_error("truncated GGUF");
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    if (pos_ + n > b_.size()) throw std::runtime_error("truncated string");
    std::string s(b_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  Scalar scalar(uint32_t type) {
    switch (type) {
      case 0: return uint64_t(get<uint8_t>());
      case 1: return int64_t(get<int8_t>());
      case 2: return uint64_t(get<uint16_t>());
      case 3: return int64_t(get<int16_t>());
      case 4: return uint64_t(get<uint32_t>());
      case 5: return int64_t(get<int32_t>());
      case 6: return double(get<float>());
      case 7: {
        const auto v = get<uint8_t>();
        if (v > 1) throw std::runtime_error("bad bool");
        return v == 1;
      }
      case 8: return str();
      case 10: return get<uint64_t>();
      case 11: return get<int64_t>();
      case 12: return get<double>();
      default: throw std::runtime_error("bad value type " + std::to_string(type));
    }
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<char>& b_;
  size_t pos_ = 0;
};

Parsed parse_gguf(const fs::path& path) {
  Parsed p;
  std::ifstream f(path, std::ios::binary);
  p.bytes.assign(std::istreambuf_iterator<char>(f), {});
  Cursor c(p.bytes);
  if (c.get<uint32_t>() != 0x46554747u) throw std::runtime_error("bad magic");  // "GGUF"
  p.version = c.get<uint32_t>();
  p.n_tensors = c.get<uint64_t>();
  p.n_kv = c.get<uint64_t>();
  for (uint64_t i = 0; i < p.n_kv; ++i) {
    const std::string key = c.str();
    KvValue v;
    v.type = c.get<uint32_t>();
    if (v.type == 9) {
      v.elem_type = c.get<uint32_t>();
      const auto n = c.get<uint64_t>();
      for (uint64_t j = 0; j < n; ++j) v.array.push_back(c.scalar(v.elem_type));
    } else {
      v.scalar = c.scalar(v.type);
    }
    if (!p.kv.emplace(key, std::move(v)).second) throw std::runtime_error("duplicate key " + key);
    p.kv_order.push_back(key);
  }
  for (uint64_t i = 0; i < p.n_tensors; ++i) {
    const std::string name = c.str();
    Info t;
    const auto n_dims = c.get<uint32_t>();
    for (uint32_t d = 0; d < n_dims; ++d) t.ne.push_back(c.get<uint64_t>());
    t.type = c.get<uint32_t>();
    t.offset = c.get<uint64_t>();
    if (!p.tensors.emplace(name, t).second) throw std::runtime_error("duplicate tensor " + name);
    p.tensor_order.push_back(name);
  }
  uint64_t alignment = 32;
  if (p.kv.count("general.alignment")) alignment = std::get<uint64_t>(p.kv.at("general.alignment").scalar);
  p.data_start = (c.pos() + alignment - 1) / alignment * alignment;
  return p;
}

uint64_t type_size(uint32_t t) { return t == 0 ? 4 : 2; }  // F32 = 0; F16 = 1 and BF16 = 30 are 2 bytes
uint64_t numel(const Info& t) {
  uint64_t n = 1;
  for (auto d : t.ne) n *= d;
  return n;
}

uint64_t kv_u(const Parsed& p, const std::string& k) {
  const KvValue& v = p.kv.at(k);
  EXPECT_EQ(v.type, 4u) << k;  // UINT32, as llama.cpp reads these keys
  return std::get<uint64_t>(v.scalar);
}
double kv_f(const Parsed& p, const std::string& k) {
  const KvValue& v = p.kv.at(k);
  EXPECT_EQ(v.type, 6u) << k;  // FLOAT32
  return std::get<double>(v.scalar);
}

float checkpoint_value(const TensorView& t, int64_t i) {
  if (t.dtype == DType::F32) {
    float v;
    std::memcpy(&v, t.data.data() + i * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, t.data.data() + i * 2, 2);
  return t.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
float gguf_value(const Parsed& p, const std::string& name, uint64_t i) {
  const Info& t = p.tensors.at(name);
  const std::byte* d = p.data(name);
  if (t.type == 0) {
    float v;
    std::memcpy(&v, d + i * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, d + i * 2, 2);
  return t.type == 30 ? bf16_to_f32(h) : f16_to_f32(h);
}

// --- the container ---------------------------------------------------------------------------

TEST(GgufWriter, RoundTripsMetadataAndAlignedTensors) {
  test::TempDir dir;
  GgufWriter w;
  w.add_string("general.architecture", "test");
  w.add_u32("a.u32", 7);
  w.add_i32("a.i32", -3);
  w.add_f32("a.f32", 0.5f);
  w.add_bool("a.bool", true);
  w.add_u64("a.u64", uint64_t(1) << 40);
  w.add_string_array("a.strs", {"x", "", "yz"});
  w.add_i32_array("a.ints", {1, -2, 3});
  std::vector<float> v3 = {1, 2, 3};  // 12 bytes: the next tensor must be padded
  std::vector<uint16_t> v5 = {1, 2, 3, 4, 5, 6};
  w.add_tensor({"t0", GgmlType::F32, {3}, [&](const GgufSink& s) { s(std::as_bytes(std::span(v3))); }});
  w.add_tensor({"t1", GgmlType::BF16, {3, 2}, [&](const GgufSink& s) {
                  s(std::as_bytes(std::span(v5)).first(4));  // in pieces
                  s(std::as_bytes(std::span(v5)).subspan(4));
                }});
  EXPECT_THROW(w.add_tensor({"t0", GgmlType::F32, {1}, [](const GgufSink&) {}}), Error);
  EXPECT_THROW(w.add_u32("a.u32", 1), Error);
  const fs::path path = dir.path() / "t.gguf";
  const uint64_t size = w.write(path);
  EXPECT_EQ(size, fs::file_size(path));
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));

  const Parsed p = parse_gguf(path);
  EXPECT_EQ(p.version, 3u);
  EXPECT_EQ(p.n_kv, 8u);
  EXPECT_EQ(p.n_tensors, 2u);
  EXPECT_EQ(std::get<std::string>(p.kv.at("general.architecture").scalar), "test");
  EXPECT_EQ(std::get<uint64_t>(p.kv.at("a.u32").scalar), 7u);
  EXPECT_EQ(std::get<int64_t>(p.kv.at("a.i32").scalar), -3);
  EXPECT_EQ(std::get<double>(p.kv.at("a.f32").scalar), 0.5);
  EXPECT_EQ(std::get<bool>(p.kv.at("a.bool").scalar), true);
  EXPECT_EQ(std::get<uint64_t>(p.kv.at("a.u64").scalar), uint64_t(1) << 40);
  ASSERT_EQ(p.kv.at("a.strs").array.size(), 3u);
  EXPECT_EQ(std::get<std::string>(p.kv.at("a.strs").array[2]), "yz");
  EXPECT_EQ(std::get<int64_t>(p.kv.at("a.ints").array[1]), -2);
  EXPECT_EQ(p.data_start % 32, 0u);
  EXPECT_EQ(p.tensors.at("t0").offset, 0u);
  EXPECT_EQ(p.tensors.at("t1").offset, 32u);
  EXPECT_EQ(p.tensors.at("t1").type, 30u);
  EXPECT_EQ(p.tensors.at("t1").ne, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(std::memcmp(p.data("t1"), v5.data(), 12), 0);
  EXPECT_EQ(gguf_value(p, "t0", 2), 3.0f);
  EXPECT_EQ(p.bytes.size(), p.data_start + 32 + 12);
}

TEST(GgufWriter, ProducerWithWrongByteCountFailsAndLeavesNoFile) {
  test::TempDir dir;
  GgufWriter w;
  std::vector<float> v = {1, 2};
  w.add_tensor({"short", GgmlType::F32, {3}, [&](const GgufSink& s) { s(std::as_bytes(std::span(v))); }});
  const fs::path path = dir.path() / "bad.gguf";
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));
}

TEST(GgufVocab, Gpt2ByteSpellingIsAReversibleMapOfAllBytes) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) seen.insert(gpt2_byte_encode(std::string(1, char(b))));
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(gpt2_byte_encode("A b\n"), "A\xC4\xA0" "b\xC4\x8A");  // space -> U+0120, newline -> U+010A
}

// --- the deepseek2 export ----------------------------------------------------------------------

class GgufExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    model_ = test::make_tiny_model(*dir_);
    gguf_ = dir_->path() / "tiny.gguf";
    export_gguf_deepseek2(model_, gguf_);
    parsed_ = new Parsed(parse_gguf(gguf_));
  }
  static void TearDownTestSuite() {
    delete parsed_;
    delete dir_;
  }
  static test::TempDir* dir_;
  static fs::path model_, gguf_;
  static Parsed* parsed_;
};
test::TempDir* GgufExport::dir_ = nullptr;
fs::path GgufExport::model_, GgufExport::gguf_;
Parsed* GgufExport::parsed_ = nullptr;

TEST_F(GgufExport, HeaderAndTensorInfosAreWellFormed) {
  const Parsed& p = *parsed_;
  EXPECT_EQ(p.version, 3u);
  EXPECT_EQ(p.n_kv, p.kv.size());
  EXPECT_EQ(p.n_tensors, p.tensors.size());
  EXPECT_EQ(p.data_start % 32, 0u);
  uint64_t end = 0;
  for (const auto& [name, t] : p.tensors) {
    EXPECT_TRUE(t.type == 0 || t.type == 1 || t.type == 30) << name;
    EXPECT_EQ(t.offset % 32, 0u) << name;
    EXPECT_LE(p.data_start + t.offset + numel(t) * type_size(t.type), p.bytes.size()) << name;
    end = std::max(end, t.offset + numel(t) * type_size(t.type));
  }
  EXPECT_EQ(p.data_start + end, p.bytes.size());
  // No two tensors overlap: sorted by offset, each ends before the next starts.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, t] : p.tensors) spans.push_back({t.offset, t.offset + numel(t) * type_size(t.type)});
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
}

TEST_F(GgufExport, MetadataDescribesTheModelAsLlamaCppReadsIt) {
  const Parsed& p = *parsed_;
  const ModelConfig c = ModelConfig::load(model_);
  EXPECT_EQ(std::get<std::string>(p.kv.at("general.architecture").scalar), "deepseek2");
  const std::string a = "deepseek2.";
  EXPECT_EQ(kv_u(p, a + "block_count"), uint64_t(c.num_hidden_layers));
  EXPECT_EQ(kv_u(p, a + "embedding_length"), uint64_t(c.hidden_size));
  EXPECT_EQ(kv_u(p, a + "feed_forward_length"), uint64_t(c.intermediate_size));
  EXPECT_EQ(kv_u(p, a + "attention.head_count"), uint64_t(c.num_attention_heads));
  EXPECT_EQ(kv_u(p, a + "attention.head_count_kv"), 1u);
  EXPECT_EQ(kv_u(p, a + "attention.q_lora_rank"), uint64_t(c.q_lora_rank));
  EXPECT_EQ(kv_u(p, a + "attention.kv_lora_rank"), uint64_t(c.kv_lora_rank));
  EXPECT_EQ(kv_u(p, a + "attention.key_length"), uint64_t(c.kv_lora_rank + c.qk_rope_head_dim));
  EXPECT_EQ(kv_u(p, a + "attention.value_length"), uint64_t(c.kv_lora_rank));
  EXPECT_EQ(kv_u(p, a + "attention.key_length_mla"), uint64_t(c.qk_nope_head_dim + c.qk_rope_head_dim));
  EXPECT_EQ(kv_u(p, a + "attention.value_length_mla"), uint64_t(c.v_head_dim));
  EXPECT_EQ(kv_u(p, a + "rope.dimension_count"), uint64_t(c.qk_rope_head_dim));
  EXPECT_EQ(kv_u(p, a + "expert_count"), uint64_t(c.n_routed_experts));
  EXPECT_EQ(kv_u(p, a + "expert_used_count"), uint64_t(c.num_experts_per_tok));
  EXPECT_EQ(kv_u(p, a + "expert_shared_count"), uint64_t(c.n_shared_experts));
  EXPECT_EQ(kv_u(p, a + "expert_group_count"), uint64_t(c.n_group));
  EXPECT_EQ(kv_u(p, a + "expert_group_used_count"), uint64_t(c.topk_group));
  EXPECT_EQ(kv_u(p, a + "expert_feed_forward_length"), uint64_t(c.moe_intermediate_size));
  EXPECT_EQ(kv_u(p, a + "leading_dense_block_count"), uint64_t(c.first_k_dense_replace));
  EXPECT_EQ(kv_u(p, a + "expert_gating_func"), 2u);  // sigmoid
  EXPECT_EQ(kv_u(p, a + "vocab_size"), uint64_t(c.vocab_size));
  EXPECT_EQ(std::get<bool>(p.kv.at(a + "expert_weights_norm").scalar), true);
  EXPECT_FLOAT_EQ(float(kv_f(p, a + "expert_weights_scale")), float(c.routed_scaling_factor));
  EXPECT_FLOAT_EQ(float(kv_f(p, a + "attention.layer_norm_rms_epsilon")), float(c.rms_norm_eps));
  EXPECT_FLOAT_EQ(float(kv_f(p, a + "rope.freq_base")), float(c.rope_theta));
  EXPECT_EQ(std::get<std::string>(p.kv.at(a + "rope.scaling.type").scalar), "yarn");
  EXPECT_FLOAT_EQ(float(kv_f(p, a + "rope.scaling.factor")), float(c.rope_scaling.factor));
  EXPECT_EQ(kv_u(p, a + "rope.scaling.original_context_length"),
            uint64_t(c.rope_scaling.original_max_position_embeddings));
  EXPECT_FLOAT_EQ(float(kv_f(p, a + "rope.scaling.yarn_log_multiplier")), float(0.1 * c.rope_scaling.mscale_all_dim));
}

TEST_F(GgufExport, VocabularyIsGpt2WithMergesThatRebuildEveryToken) {
  const Parsed& p = *parsed_;
  const ModelConfig c = ModelConfig::load(model_);
  const Tokenizer tok = Tokenizer::load(model_);
  EXPECT_EQ(std::get<std::string>(p.kv.at("tokenizer.ggml.model").scalar), "gpt2");
  EXPECT_EQ(std::get<std::string>(p.kv.at("tokenizer.ggml.pre").scalar), "kimi-k2");
  const auto& tokens = p.kv.at("tokenizer.ggml.tokens").array;
  const auto& types = p.kv.at("tokenizer.ggml.token_type").array;
  const auto& merges = p.kv.at("tokenizer.ggml.merges").array;
  ASSERT_EQ(tokens.size(), size_t(c.vocab_size));
  ASSERT_EQ(types.size(), size_t(c.vocab_size));
  EXPECT_EQ(kv_u(p, "tokenizer.ggml.bos_token_id"), uint64_t(c.bos_token_id));
  EXPECT_EQ(kv_u(p, "tokenizer.ggml.eos_token_id"), uint64_t(c.eos_token_id));
  std::map<std::string, int64_t> id_of;
  size_t multi_byte = 0;
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    const std::string& t = std::get<std::string>(tokens[size_t(i)]);
    id_of[t] = i;
    if (tok.is_special(i)) {
      EXPECT_EQ(std::get<int64_t>(types[size_t(i)]), 3) << i;  // CONTROL
      EXPECT_EQ(t, tok.token_bytes(i));
    } else {
      EXPECT_EQ(std::get<int64_t>(types[size_t(i)]), 1) << i;  // NORMAL
      EXPECT_EQ(t, gpt2_byte_encode(tok.token_bytes(i)));
      multi_byte += tok.token_bytes(i).size() > 1;
    }
  }
  // One merge per multi-byte token, each joining two tokens of lower rank into that token, in
  // rank order (llama.cpp's merge priority is the position in this list).
  ASSERT_EQ(merges.size(), multi_byte);
  int64_t last = -1;
  for (const Scalar& m : merges) {
    const std::string& s = std::get<std::string>(m);
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos);
    const std::string l = s.substr(0, sp), r = s.substr(sp + 1);
    ASSERT_TRUE(id_of.count(l) && id_of.count(r) && id_of.count(l + r)) << s;
    EXPECT_LT(id_of[l], id_of[l + r]);
    EXPECT_LT(id_of[r], id_of[l + r]);
    EXPECT_GT(id_of[l + r], last);
    last = id_of[l + r];
  }
}

TEST_F(GgufExport, TensorsHoldTheCheckpointsValuesInLlamaCppsLayout) {
  const Parsed& p = *parsed_;
  const ModelConfig c = ModelConfig::load(model_);
  const Checkpoint ck(model_);
  std::set<std::string> expected_names;
  // Dims are the safetensors shape reversed; values equal (converted exactly to F32 for 1-D
  // tensors and the router).
  const auto check_same = [&](const std::string& gguf, const std::string& hf, uint32_t want_type) {
    expected_names.insert(gguf);
    const TensorView& t = ck.get(hf);
    ASSERT_TRUE(p.tensors.count(gguf)) << gguf;
    const Info& i = p.tensors.at(gguf);
    EXPECT_EQ(i.type, want_type) << gguf;
    EXPECT_EQ(i.ne, (std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend()))) << gguf;
    for (int64_t k = 0; k < t.numel(); ++k)
      if (gguf_value(p, gguf, uint64_t(k)) != checkpoint_value(t, k)) {
        ADD_FAILURE() << gguf << " differs at " << k;
        break;
      }
  };
  const uint32_t bf16 = 30, f32 = 0;
  check_same("token_embd.weight", model_tensor(c, "embed_tokens.weight"), bf16);
  check_same("output_norm.weight", model_tensor(c, "norm.weight"), f32);
  check_same("output.weight", lm_head_tensor(c), bf16);
  const int64_t H = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim, r = c.kv_lora_rank;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const auto hf = [&](const std::string& rest) { return layer_tensor(c, l, rest); };
    check_same(b + "attn_norm.weight", hf("input_layernorm.weight"), f32);
    check_same(b + "attn_q_a.weight", hf("self_attn.q_a_proj.weight"), bf16);
    check_same(b + "attn_q_a_norm.weight", hf("self_attn.q_a_layernorm.weight"), f32);
    check_same(b + "attn_q_b.weight", hf("self_attn.q_b_proj.weight"), bf16);
    check_same(b + "attn_kv_a_mqa.weight", hf("self_attn.kv_a_proj_with_mqa.weight"), bf16);
    check_same(b + "attn_kv_a_norm.weight", hf("self_attn.kv_a_layernorm.weight"), f32);
    check_same(b + "attn_output.weight", hf("self_attn.o_proj.weight"), bf16);
    check_same(b + "ffn_norm.weight", hf("post_attention_layernorm.weight"), f32);

    // kv_b [H*(nope+v), r]: k_b[h][k][d] = kv_b[h*(nope+v)+d][k], v_b[h][j][k] = kv_b[h*(nope+v)+nope+j][k].
    const TensorView& kv_b = ck.get(hf("self_attn.kv_b_proj.weight"));
    expected_names.insert(b + "attn_k_b.weight");
    expected_names.insert(b + "attn_v_b.weight");
    EXPECT_EQ(p.tensors.at(b + "attn_k_b.weight").ne, (std::vector<uint64_t>{uint64_t(nope), uint64_t(r), uint64_t(H)}));
    EXPECT_EQ(p.tensors.at(b + "attn_v_b.weight").ne, (std::vector<uint64_t>{uint64_t(r), uint64_t(v), uint64_t(H)}));
    int bad = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t k = 0; k < r; ++k) {
        for (int64_t d = 0; d < nope; ++d)
          bad += gguf_value(p, b + "attn_k_b.weight", uint64_t((h * r + k) * nope + d)) !=
                 checkpoint_value(kv_b, (h * (nope + v) + d) * r + k);
        for (int64_t j = 0; j < v; ++j)
          bad += gguf_value(p, b + "attn_v_b.weight", uint64_t((h * v + j) * r + k)) !=
                 checkpoint_value(kv_b, (h * (nope + v) + nope + j) * r + k);
      }
    EXPECT_EQ(bad, 0) << "layer " << l << " kv_b split";
    EXPECT_FALSE(p.tensors.count(b + "attn_kv_b.weight"));

    if (!c.is_moe_layer(l)) {
      check_same(b + "ffn_gate.weight", hf("mlp.gate_proj.weight"), bf16);
      check_same(b + "ffn_up.weight", hf("mlp.up_proj.weight"), bf16);
      check_same(b + "ffn_down.weight", hf("mlp.down_proj.weight"), bf16);
      continue;
    }
    check_same(b + "ffn_gate_inp.weight", hf("mlp.gate.weight"), f32);
    check_same(b + "exp_probs_b.bias", hf("mlp.gate.e_score_correction_bias"), f32);
    check_same(b + "ffn_gate_shexp.weight", hf("mlp.shared_experts.gate_proj.weight"), bf16);
    check_same(b + "ffn_up_shexp.weight", hf("mlp.shared_experts.up_proj.weight"), bf16);
    check_same(b + "ffn_down_shexp.weight", hf("mlp.shared_experts.down_proj.weight"), bf16);
    for (const std::string proj : {"gate", "up", "down"}) {
      const std::string name = b + "ffn_" + proj + "_exps.weight";
      expected_names.insert(name);
      const Info& i = p.tensors.at(name);
      const TensorView& e0 = ck.get(hf("mlp.experts.0." + proj + "_proj.weight"));
      EXPECT_EQ(i.type, bf16);
      EXPECT_EQ(i.ne, (std::vector<uint64_t>{uint64_t(e0.shape[1]), uint64_t(e0.shape[0]),
                                             uint64_t(c.n_routed_experts)}));
      for (int64_t e = 0; e < c.n_routed_experts; ++e) {
        const TensorView& t = ck.get(hf("mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight"));
        EXPECT_EQ(std::memcmp(p.data(name) + uint64_t(e * t.numel()) * 2, t.data.data(), t.data.size()), 0)
            << name << " expert " << e;
      }
    }
  }
  EXPECT_EQ(std::set<std::string>(p.tensor_order.begin(), p.tensor_order.end()), expected_names);
}

TEST(GgufExportErrors, RejectsQuantizedCheckpoints) {
  test::TempDir dir;
  const fs::path model = test::make_tiny_model(dir);
  nlohmann::json cfg;
  {
    std::ifstream f(model / "config.json");
    f >> cfg;
  }
  cfg["text_config"]["quantization_config"] = {{"quant_method", "compressed-tensors"}};
  cfg["quantization_config"] = cfg["text_config"]["quantization_config"];
  std::ofstream(model / "config.json") << cfg.dump();
  try {
    export_gguf_deepseek2(model, dir.path() / "q.gguf");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BF16, F16 and F32"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    // A config the loader rejects first is fine too, as long as nothing is written.
  }
  EXPECT_FALSE(fs::exists(dir.path() / "q.gguf"));
}

TEST(GgufExportErrors, F32CheckpointExportsF32Matrices) {
  test::TempDir dir;
  MakeModelOptions o;
  o.dtype = DType::F32;
  const fs::path model = test::make_tiny_model(dir, "tiny32", o);
  export_gguf_deepseek2(model, dir.path() / "t.gguf");
  const Parsed p = parse_gguf(dir.path() / "t.gguf");
  EXPECT_EQ(p.tensors.at("blk.1.ffn_up_exps.weight").type, 0u);
  EXPECT_EQ(kv_u(p, "general.file_type"), 0u);
}

// --outtype f32: every tensor of the BF16 export, in the same layout, widened exactly to F32.
TEST_F(GgufExport, F32OutTypeWidensEveryTensorExactly) {
  const fs::path wide = dir_->path() / "tiny-f32-out.gguf";
  export_gguf_deepseek2(model_, wide, GgufOutType::F32);
  const Parsed w = parse_gguf(wide);
  const Parsed& p = *parsed_;
  EXPECT_EQ(kv_u(w, "general.file_type"), 0u);
  ASSERT_EQ(w.tensors.size(), p.tensors.size());
  size_t widened = 0;
  for (const auto& [name, t] : p.tensors) {
    const Info& u = w.tensors.at(name);
    EXPECT_EQ(u.type, 0u) << name;
    EXPECT_EQ(u.ne, t.ne) << name;
    if (t.type != 0) ++widened;
    for (uint64_t i = 0; i < numel(t); ++i)
      if (gguf_value(w, name, i) != gguf_value(p, name, i)) {
        ADD_FAILURE() << name << "[" << i << "]";
        break;
      }
  }
  EXPECT_GT(widened, 0u);  // the fixture's export is BF16
}

}  // namespace
