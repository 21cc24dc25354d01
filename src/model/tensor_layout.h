#pragma once
// The published tensor names and shapes of a DeepSeek-V3 / Kimi text model, derived from its
// config. The loader checks a checkpoint against this list and `kimi make-model` writes it, so
// both always agree with each other and with the real Kimi-K2.5 files.
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "format/model_config.h"

namespace kimi {

enum class TensorRole { Embedding, Norm, Linear, Router, RouterBias, LmHead };

struct TensorLayout {
  std::string name;  // full published name, prefix included
  std::vector<int64_t> shape;
  TensorRole role;
  DType published_dtype;  // what the real checkpoint stores (bf16, except the router bias: f32)
  int64_t fan_in = 0;     // input features of a linear (for initialisation)
};

// Every tensor of the text model, in checkpoint order (embeddings, layers, final norm, head).
// MTP layers (num_nextn_predict_layers) are not part of it: mtp_layer_layout.
std::vector<TensorLayout> text_model_layout(const ModelConfig& c);

// Appends decoder layer l's tensors (attention, then the dense MLP or the MoE that
// c.is_moe_layer(l) says).
void append_decoder_layer_layout(const ModelConfig& c, int64_t l, std::vector<TensorLayout>& out);

// DeepSeek-V3's multi-token-prediction layer `index` (0 .. num_nextn_predict_layers - 1), stored as
// model.layers.<num_hidden_layers + index>: embed_tokens (its own copy), enorm, hnorm, eh_proj
// [hidden, 2 * hidden], a full decoder block under the usual names, shared_head.norm and
// shared_head.head [vocab, hidden] (shared/serving-protocols.md §1.5).
std::vector<TensorLayout> mtp_layer_layout(const ModelConfig& c, int64_t index = 0);

// Name helpers shared by the loader and the layout: "<prefix>model.layers.<i>.<rest>".
std::string layer_tensor(const ModelConfig& c, int64_t layer, const std::string& rest);
std::string model_tensor(const ModelConfig& c, const std::string& rest);  // "<prefix>model.<rest>"
std::string lm_head_tensor(const ModelConfig& c);                         // "<prefix>lm_head.weight"

}  // namespace kimi
