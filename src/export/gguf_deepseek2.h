#pragma once
// `kimi export-gguf`: a checkpoint directory (either published form) as a GGUF file of
// llama.cpp's `deepseek2` architecture, with the tensor names, metadata keys and MLA layout that
// llama.cpp's own converter writes:
//  - kv_b_proj split per head into attn_k_b (transposed: ne {nope, kv_lora_rank, heads}) and
//    attn_v_b (ne {kv_lora_rank, v_head_dim, heads}), with key/value_length describing the MQA
//    latent cache and key/value_length_mla the decompressed heads;
//  - the routed experts stacked into one 3-D tensor per projection (ffn_{gate,up,down}_exps);
//  - matrices in the checkpoint's float type, norms, the router and its bias as F32 (exact);
//  - the tiktoken vocabulary as a "gpt2" vocabulary with pre-tokenizer "kimi-k2";
//  - YaRN's attention scale as rope.scaling.yarn_log_multiplier = 0.1 x mscale_all_dim.
// The rope itself is not rescaled by llama.cpp, which matches these models only while
// rope_scaling.mscale == mscale_all_dim (true of Kimi-K2.5 and DeepSeek-V3).
#include <cstdint>
#include <filesystem>
#include <string>

namespace kimi {

// The matrices' type in the file: as stored in the checkpoint, or every one widened to F32 (exact;
// llama.cpp then computes in F32, without rounding activations to BF16 as its BF16 matmul does).
enum class GgufOutType { Same, F32 };

struct GgufExportResult {
  size_t num_tensors = 0;
  size_t num_kv = 0;
  uint64_t bytes = 0;
};

// Reads config.json, the tokenizer files and the safetensors shards of model_dir and writes
// out_path, streaming one tensor (one expert / one head) at a time. Throws kimi::Error for
// checkpoints it cannot express: quantized weights or non-float tensors, MoE layers that are not
// all the layers after the leading dense ones, no shared expert.
GgufExportResult export_gguf_deepseek2(const std::filesystem::path& model_dir, const std::filesystem::path& out_path,
                                       GgufOutType out = GgufOutType::Same);

}  // namespace kimi
