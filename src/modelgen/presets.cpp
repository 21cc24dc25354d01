#include "modelgen/presets.h"

#include "common/error.h"

namespace kimi {

namespace {

struct Sizes {
  const char* name;
  int vocab, hidden, intermediate, moe_intermediate, layers, heads;
  int q_lora, kv_lora, nope, rope, v;
  int experts, per_tok, shared, n_group, topk_group;
};

// tiny: the test model (a few seconds of suite time), with grouped routing so that the group
//       selection path is exercised (Kimi itself uses one group).
// small: a few hundred million parameters for benchmarks, one routing group like Kimi-K2.5; its
//        vocabulary (6144 BPE ranks) is what the always-present training corpus yields.
// kimi-k2.5: the real model's sizes (61 layers, 384 experts); make-model's --num-layers and
//        --num-experts cut it down to what fits on disk and in memory.
constexpr Sizes kPresets[] = {
    {"tiny", 1280, 64, 160, 32, 3, 4, 48, 32, 16, 8, 16, 16, 4, 1, 4, 2},
    {"small", 6400, 1024, 2816, 512, 8, 8, 384, 256, 64, 32, 64, 32, 4, 1, 1, 1},
    {"kimi-k2.5", 163840, 7168, 18432, 2048, 61, 64, 1536, 512, 128, 64, 128, 384, 8, 1, 1, 1},
};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

nlohmann::json preset_text_config(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    // Everything not a size is Kimi-K2.5's published value (see shared/kimi-k25-facts.md).
    return {
        {"architectures", {"DeepseekV3ForCausalLM"}},
        {"model_type", "kimi_k2"},
        {"vocab_size", p.vocab},
        {"hidden_size", p.hidden},
        {"intermediate_size", p.intermediate},
        {"moe_intermediate_size", p.moe_intermediate},
        {"num_hidden_layers", p.layers},
        {"num_attention_heads", p.heads},
        {"num_key_value_heads", p.heads},
        {"q_lora_rank", p.q_lora},
        {"kv_lora_rank", p.kv_lora},
        {"qk_nope_head_dim", p.nope},
        {"qk_rope_head_dim", p.rope},
        {"v_head_dim", p.v},
        {"n_routed_experts", p.experts},
        {"num_experts_per_tok", p.per_tok},
        {"n_shared_experts", p.shared},
        {"n_group", p.n_group},
        {"topk_group", p.topk_group},
        {"first_k_dense_replace", 1},
        {"moe_layer_freq", 1},
        {"num_nextn_predict_layers", 0},
        {"routed_scaling_factor", 2.827},
        {"scoring_func", "sigmoid"},
        {"topk_method", "noaux_tc"},
        {"norm_topk_prob", true},
        {"hidden_act", "silu"},
        {"max_position_embeddings", 262144},
        {"rope_theta", 50000.0},
        {"rope_scaling",
         {{"type", "yarn"},
          {"factor", 64.0},
          {"original_max_position_embeddings", 4096},
          {"beta_fast", 32.0},
          {"beta_slow", 1.0},
          {"mscale", 1.0},
          {"mscale_all_dim", 1.0}}},
        {"rms_norm_eps", 1e-5},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"aux_loss_alpha", 0.001},
        {"seq_aux", true},
        {"ep_size", 1},
        {"pretraining_tp", 1},
        {"initializer_range", 0.02},
        {"use_cache", true},
        {"tie_word_embeddings", false},
        {"torch_dtype", "bfloat16"},
        // The top 256 ids are the special-token block, as in Kimi's 163840-entry vocabulary.
        {"bos_token_id", p.vocab - 256},
        {"eos_token_id", p.vocab - 255},
        {"pad_token_id", p.vocab - 1},
    };
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown preset '" + name + "' (known: " + known + ")");
}

}  // namespace kimi
