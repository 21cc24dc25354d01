#pragma once
// `kimi make-model --draft eagle3`: an Eagle3 draft for a preset's target in the published layout
// (LlamaForCausalLMEagle3: fc over three captured target hidden states, one decoder layer whose
// attention takes [embedding ; hidden], norm, lm_head, its own embed_tokens), with deterministic
// random weights. Such a draft is accepted rarely, which the verification makes harmless: it lets
// any preset, up to the real shapes, run and serve speculative decoding end to end.
#include <filesystem>

#include "modelgen/make_model.h"

namespace kimi {

// The draft's config.json for the target that `target` describes (its hidden size, heads,
// vocabulary, context; aux layer ids (2, L/2, L-3) clamped into the target's layers).
nlohmann::json eagle3_draft_config(const MakeModelOptions& target);

// Writes config.json and model.safetensors into out_dir.
MakeModelResult make_eagle3_draft(const std::filesystem::path& out_dir, const MakeModelOptions& target);

}  // namespace kimi
