#include "modelgen/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "common/error.h"
#include "common/rng.h"
#include "format/model_config.h"
#include "format/quantization_config.h"
#include "format/safetensors.h"
#include "model/tensor_layout.h"
#include "modelgen/chat_template_data.h"
#include "modelgen/presets.h"
#include "modelgen/quantized_tensors.h"
#include "modelgen/random_init.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tiktoken_file.h"
#include "tokenizer/tokenizer.h"

namespace kimi {

namespace {

// Scaled-down stand-in for MoonViT's config keys, so the file has Kimi-K2.5's shape. The
// vision tower's weights are not written until the engine runs it.
nlohmann::json vision_config(int64_t text_hidden) {
  return {{"model_type", "moonvit3d"},  {"patch_size", 14},
          {"init_pos_emb_height", 64},  {"init_pos_emb_width", 64},
          {"init_pos_emb_time", 4},     {"pos_emb_type", "divided_fixed"},
          {"vt_num_attention_heads", 4}, {"vt_num_hidden_layers", 2},
          {"vt_hidden_size", 64},       {"vt_intermediate_size", 128},
          {"merge_kernel_size", {2, 2}}, {"merge_type", "sd2_tpool"},
          {"video_attn_type", "spatial_temporal"}, {"mm_projector_type", "patchmerger"},
          {"mm_hidden_size", 64},       {"projector_hidden_act", "gelu"},
          {"projector_ln_eps", 1e-5},   {"text_hidden_size", text_hidden}};
}

nlohmann::json full_config(const nlohmann::json& text, CheckpointForm form) {
  if (form == CheckpointForm::DeepseekV3) return text;
  return {{"architectures", {"KimiK25ForConditionalGeneration"}},
          {"model_type", "kimi_k25"},
          {"auto_map",
           {{"AutoConfig", "configuration_kimi_k25.KimiK25Config"},
            {"AutoModel", "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
            {"AutoModelForCausalLM", "modeling_kimi_k25.KimiK25ForConditionalGeneration"}}},
          {"text_config", text},
          {"vision_config", vision_config(text["hidden_size"].get<int64_t>())},
          {"bos_token_id", text["bos_token_id"]},
          {"eos_token_id", text["eos_token_id"]},
          {"pad_token_id", text["pad_token_id"]},
          {"ignore_index", -100},
          {"media_placeholder_token_id", text["vocab_size"].get<int64_t>() - 256 + 21},
          {"tie_word_embeddings", false},
          {"use_unified_vision_chunk", true},
          {"video_placeholder", "<|kimi_k25_video_placeholder|>"},
          {"dtype", text["torch_dtype"]}};
}

void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw Error(path.string() + ": write failed");
}

// A real byte-level BPE vocabulary of vocab_size - 256 ranks trained on text every Debian system
// has, followed by Kimi's 256-token special block, and the chat template: the model takes text
// end to end, through the same files and loader as the real Kimi-K2.5.
// A vocabulary larger than the corpus yields (the real preset's 163584 ranks) gets the trained
// ranks followed by filler tokens that start with byte 0xFF, which UTF-8 text never contains, so
// they are never produced: the ids exist (the embedding and lm_head are full size) and text
// tokenizes as with the trained vocabulary alone.
constexpr int32_t kMaxTrainedRanks = 6144;

void write_tokenizer(const std::filesystem::path& dir, int64_t vocab_size) {
  const int32_t ranks = int32_t(vocab_size - Tokenizer::kNumSpecialTokens);
  const std::filesystem::path corpus[] = {kDefaultTrainingCorpus};
  const int32_t trained = std::min(ranks, kMaxTrainedRanks);
  std::vector<std::string> tokens = train_bpe_files(corpus, trained, PreTokenizer());
  if (int32_t(tokens.size()) != trained)
    throw Error("make-model: the training corpus " + std::string(kDefaultTrainingCorpus) + " yields only " +
                std::to_string(tokens.size()) + " BPE ranks; the preset needs " + std::to_string(trained));
  for (int32_t i = trained; i < ranks; ++i) {
    std::string filler(1, '\xff');
    filler += std::to_string(i);
    tokens.push_back(std::move(filler));
  }
  write_tiktoken_file(dir / "tiktoken.model", tokens);
  nlohmann::json tc = kimi_tokenizer_config(ranks);
  const std::string tmpl = kKimiK25ChatTemplate;
  if (!tmpl.empty()) {
    tc["chat_template"] = tmpl;
    std::ofstream(dir / "chat_template.jinja") << tmpl;
  }
  write_json(dir / "tokenizer_config.json", tc);
}

}  // namespace

nlohmann::json make_model_text_config(const MakeModelOptions& o) {
  nlohmann::json text = preset_text_config(o.preset);
  if (o.num_layers < 0) throw Error("make-model: --num-layers must be at least 1");
  if (o.num_layers > 0) text["num_hidden_layers"] = o.num_layers;
  if (o.num_experts < 0) throw Error("make-model: --num-experts must be positive");
  if (o.num_experts > 0) {
    const int64_t top_k = text["num_experts_per_tok"].get<int64_t>();
    const int64_t groups = text["n_group"].get<int64_t>();
    if (o.num_experts < top_k)
      throw Error("make-model: --num-experts " + std::to_string(o.num_experts) + " is fewer than the " +
                  std::to_string(top_k) + " experts each token uses");
    if (o.num_experts % groups != 0)
      throw Error("make-model: --num-experts " + std::to_string(o.num_experts) + " is not a multiple of the " +
                  std::to_string(groups) + " routing groups");
    // Each routing group must still hold enough experts for the top-k picked from its groups.
    if (o.num_experts / groups * text["topk_group"].get<int64_t>() < top_k)
      throw Error("make-model: --num-experts " + std::to_string(o.num_experts) + " leaves too few experts per group");
    text["n_routed_experts"] = o.num_experts;
  }
  if (o.mtp_layers < 0) throw Error("make-model: --mtp-layers must be 0 or more");
  text["num_nextn_predict_layers"] = o.mtp_layers;
  // What the weights are stored in: `--dtype auto` of the loader follows it.
  text["torch_dtype"] = o.dtype == DType::F32 ? "float32" : o.dtype == DType::F16 ? "float16" : "bfloat16";
  return text;
}

// Random INT4 codes and group scales of the magnitude the float init gives (uniform weights of
// bound sqrt(3 / fan_in): code k in [-7, 7] times bound / 7), without generating and quantizing
// float weights: quantizing the real preset's 17 G expert weights per layer takes ten minutes on
// our machines, this takes seconds. Used only for matrices too large for the exact path.
void append_direct_int4(const std::string& module, int64_t rows, int64_t cols, int64_t group, uint64_t seed,
                        std::vector<TensorSpec>& specs) {
  specs.push_back({module + ".weight_packed", DType::I32, {rows, cols / 8}, [=](std::span<std::byte> out) {
                     Rng rng(hash_seed(seed, (module + ".weight_packed").c_str()));
                     for (size_t i = 0; i < out.size(); i += 8) {
                       // Eight bytes of nibbles; 0 (code -8) is remapped to 8 (code 0) so codes stay symmetric.
                       uint64_t v = rng.next_u64();
                       const uint64_t zero = ~(v | (v >> 1) | (v >> 2) | (v >> 3)) & 0x1111111111111111ull;
                       v |= zero << 3;
                       std::memcpy(out.data() + i, &v, std::min<size_t>(8, out.size() - i));
                     }
                   }});
  specs.push_back({module + ".weight_scale", DType::BF16, {rows, cols / group}, [=](std::span<std::byte> out) {
                     const uint16_t s = f32_to_bf16(float(std::sqrt(3.0 / double(cols)) / 7.0));
                     for (size_t i = 0; i + 1 < out.size(); i += 2) std::memcpy(out.data() + i, &s, 2);
                   }});
  specs.push_back({module + ".weight_shape", DType::I32, {2}, [=](std::span<std::byte> out) {
                     const int32_t shape[2] = {int32_t(rows), int32_t(cols)};
                     std::memcpy(out.data(), shape, sizeof shape);
                   }});
}

// Matrices at least this large in INT4 take the direct path above (the real preset's experts are
// 14.7 M weights; every smaller preset's are far below).
constexpr int64_t kDirectInt4MinWeights = int64_t(4) << 20;

MakeModelPlan plan_model(const MakeModelOptions& o) {
  if (o.dtype != DType::BF16 && o.dtype != DType::F16 && o.dtype != DType::F32)
    throw Error("make-model: --dtype must be bf16, f16 or f32");
  MakeModelPlan plan;
  const nlohmann::json text = make_model_text_config(o);
  nlohmann::json& config = plan.config;
  config = full_config(text, o.form);
  const ModelConfig mc = ModelConfig::from_json(config, "preset " + o.preset);

  MakeModelResult& result = plan.result;
  std::vector<TensorSpec>& specs = plan.specs;
  nlohmann::json& description = plan.modelslim_description;  // msModelSlim types, for w4a8 / w8a8
  std::vector<TensorLayout> layout = text_model_layout(mc);
  // The MTP layers' embed_tokens and shared_head.head are, as in DeepSeek-V3's release, copies
  // of the target's embedding and lm_head (the same random streams); the rest is their own.
  std::map<std::string, std::string> copied_streams;
  for (int64_t m = 0; m < mc.num_nextn_predict_layers; ++m) {
    const int64_t l = mc.num_hidden_layers + m;
    copied_streams[layer_tensor(mc, l, "embed_tokens.weight")] = "model.embed_tokens.weight";
    copied_streams[layer_tensor(mc, l, "shared_head.head.weight")] = "lm_head.weight";
    for (TensorLayout& t : mtp_layer_layout(mc, m)) layout.push_back(std::move(t));
  }
  for (TensorLayout& t : layout) {
    // Kimi-K2.5 stores the router bias in f32 whatever the weights' dtype.
    const DType dtype = t.published_dtype == DType::F32 ? DType::F32 : o.dtype;
    const auto copied = copied_streams.find(t.name);
    const std::string stream = copied != copied_streams.end() ? copied->second : t.name.substr(mc.tensor_prefix.size());
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    result.num_parameters += numel;
    const bool linear = t.role == TensorRole::Linear || t.role == TensorRole::LmHead;
    // A quantized linear stores the quantization of the float model's (rounded) weights, so
    // the float and quantized checkpoints of one seed can be compared.
    auto source = [t, dtype, stream, seed = o.seed, numel] {
      std::vector<std::byte> raw(size_t(numel) * dtype_size(dtype));
      fill_random_tensor(t, stream, dtype, seed, raw);
      std::vector<float> f(static_cast<size_t>(numel));
      convert_to_f32(dtype, raw.data(), f.data(), numel);
      return f;
    };
    const std::string module = t.name.substr(0, t.name.size() - 7);
    if (linear && o.quant == QuantPreset::Int4 && t.shape[0] * t.shape[1] >= kDirectInt4MinWeights) {
      const LinearQuant q = linear_quant(o.quant, module);
      if (q.format != WeightFormat::Dense) {
        append_direct_int4(module, t.shape[0], t.shape[1], q.group_size, o.seed, specs);
        continue;
      }
    }
    if (linear && o.quant != QuantPreset::None &&
        append_quantized_linear(o.quant, t.name.substr(0, t.name.size() - 7), t.shape[0], t.shape[1], source, specs,
                                description))
      continue;
    if (o.quant == QuantPreset::W4A8 || o.quant == QuantPreset::W8A8) description[t.name] = "FLOAT";
    specs.push_back({t.name, dtype, t.shape, [t, dtype, seed = o.seed, stream](std::span<std::byte> out) {
                       fill_random_tensor(t, stream, dtype, seed, out);
                     }});
  }
  result.num_tensors = int64_t(specs.size());
  for (const TensorSpec& s : specs) {
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    result.bytes += size_t(numel) * dtype_size(s.dtype);
  }

  if (o.quant == QuantPreset::Int4) {
    // The release carries the same quantization_config at the top level and in text_config.
    config["quantization_config"] = CompressedTensorsConfig::kimi_k25_int4_json();
    // The MTP layers' own projection and head stay in bf16 like the target's lm_head.
    if (mc.num_nextn_predict_layers > 0)
      for (const char* m : {"re:.*eh_proj.*", "re:.*shared_head.*"}) config["quantization_config"]["ignore"].push_back(m);
    if (config.contains("text_config")) config["text_config"]["quantization_config"] = config["quantization_config"];
  } else if (o.quant != QuantPreset::None) {
    description["model_quant_type"] = o.quant == QuantPreset::W4A8 ? "W4A8_DYNAMIC" : "W8A8_DYNAMIC";
    description["version"] = "1.0.0";
  }
  return plan;
}

MakeModelResult make_model(const std::filesystem::path& out_dir, const MakeModelOptions& o) {
  const MakeModelPlan plan = plan_model(o);
  const nlohmann::json& text = plan.config.contains("text_config") ? plan.config["text_config"] : plan.config;
  std::filesystem::create_directories(out_dir);
  if (o.quant != QuantPreset::None && o.quant != QuantPreset::Int4)
    write_json(out_dir / ModelSlimDescription::kFileName, plan.modelslim_description);
  write_json(out_dir / "config.json", plan.config);
  write_json(out_dir / "generation_config.json",
             // Kimi ends chat turns with <|im_end|> (the special block's third id).
             {{"bos_token_id", text["bos_token_id"]}, {"eos_token_id", text["vocab_size"].get<int64_t>() - 254},
              {"max_length", text["max_position_embeddings"]}});
  write_sharded_checkpoint(out_dir, plan.specs, o.max_shard_bytes);
  write_tokenizer(out_dir, text["vocab_size"].get<int64_t>());
  return plan.result;
}

}  // namespace kimi
