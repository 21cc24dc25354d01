#include <cstdio>

#include "args.h"
#include "common/error.h"
#include "modelgen/eagle3_draft.h"
#include "modelgen/make_model.h"
#include "modelgen/presets.h"

namespace kimi::cli {

int run_make_model(int argc, char** argv) {
  const Args a(argc, argv, 2, {"preset", "seed", "dtype", "form", "max-shard-size", "quant", "num-layers", "num-experts", "draft", "mtp-layers"},
               {"help"});
  if (a.has("help") || a.positionals().size() != 1) {
    std::printf(
        "usage: kimi make-model OUT_DIR [--preset tiny|small|kimi-k2.5] [--seed N] [--dtype bf16|f16|f32]\n"
        "                       [--form kimi-k25|deepseek-v3] [--max-shard-size BYTES]\n"
        "                       [--quant int4|w4a8|w8a8] [--num-layers N] [--num-experts E] [--draft eagle3]\n"
        "                       [--mtp-layers N]\n\n"
        "Writes a Hugging Face checkpoint directory of the Kimi-K2.5 architecture and layout with\n"
        "deterministic random weights (same seed, same bytes). --quant stores the same weights\n"
        "quantized: int4 as the official INT4 release (compressed-tensors, routed experts, group 32),\n"
        "w4a8 / w8a8 in msModelSlim's layout with quant_model_description.json (Ascend).\n"
        "kimi-k2.5 has the real model's shapes; --num-layers N keeps the dense first layer and N-1\n"
        "MoE layers, --num-experts E keeps E routed experts (top-8 routing stays). With --quant int4\n"
        "its experts get random INT4 codes directly (not the quantization of the bf16 weights).\n"
        "The dense layer plus one MoE layer: ~15 GB in INT4; BF16 needs --num-experts <= ~64.\n"
        "--draft eagle3 writes instead an Eagle3 draft (LlamaForCausalLMEagle3, the published layout)\n"
        "for the target those options describe, to serve with --speculative-config.\n"
        "--mtp-layers N adds DeepSeek-V3's multi-token-prediction layers (num_nextn_predict_layers N,\n"
        "model.layers.<num_hidden_layers>...) for --speculative-config '{\"method\":\"mtp\",...}'.\n");
    return a.has("help") ? 0 : 1;
  }
  MakeModelOptions o;
  o.preset = a.get("preset", "tiny");
  o.seed = uint64_t(a.get_int("seed", 0));
  const std::string dtype = a.get("dtype", "bf16");
  if (dtype == "bf16") o.dtype = DType::BF16;
  else if (dtype == "f16") o.dtype = DType::F16;
  else if (dtype == "f32") o.dtype = DType::F32;
  else throw Error("--dtype must be bf16, f16 or f32");
  const std::string form = a.get("form", "kimi-k25");
  if (form == "kimi-k25") o.form = CheckpointForm::KimiK25;
  else if (form == "deepseek-v3") o.form = CheckpointForm::DeepseekV3;
  else throw Error("--form must be kimi-k25 or deepseek-v3");
  const int64_t shard = a.get_int("max-shard-size", int64_t(o.max_shard_bytes));
  if (shard <= 0) throw Error("--max-shard-size must be positive");
  o.max_shard_bytes = size_t(shard);
  if (a.has("num-layers") && a.get_int("num-layers", 0) < 1) throw Error("--num-layers must be at least 1");
  if (a.has("num-experts") && a.get_int("num-experts", 0) < 1) throw Error("--num-experts must be positive");
  o.num_layers = a.get_int("num-layers", 0);
  o.num_experts = a.get_int("num-experts", 0);
  if (a.has("mtp-layers") && a.get_int("mtp-layers", 0) < 0) throw Error("--mtp-layers must be 0 or more");
  o.mtp_layers = a.get_int("mtp-layers", 0);
  if (a.has("quant")) o.quant = parse_quant_preset(a.get("quant", ""));

  if (a.has("draft")) {
    if (a.get("draft", "") != "eagle3") throw Error("--draft must be eagle3");
    if (o.quant != QuantPreset::None) throw Error("--draft eagle3 writes float weights: no --quant");
    const MakeModelResult r = make_eagle3_draft(a.positionals()[0], o);
    std::printf("wrote %s: an Eagle3 draft for preset %s, %lld tensors, %.1f M parameters, %.1f MB\n",
                a.positionals()[0].c_str(), o.preset.c_str(), (long long)r.num_tensors, double(r.num_parameters) / 1e6,
                double(r.bytes) / 1e6);
    return 0;
  }
  const MakeModelResult r = make_model(a.positionals()[0], o);
  std::printf("wrote %s: preset %s, %lld tensors, %.1f M parameters, %.1f MB\n", a.positionals()[0].c_str(),
              o.preset.c_str(), (long long)r.num_tensors, double(r.num_parameters) / 1e6, double(r.bytes) / 1e6);
  return 0;
}

}  // namespace kimi::cli
