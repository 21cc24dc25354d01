#pragma once
// The text model's weights, bound by name from a checkpoint. Matrices point into the mapped
// safetensors files (no copy); the small vectors (norms, router bias) are converted to f32.
#include <memory>
#include <optional>
#include <vector>

#include "format/checkpoint.h"
#include "format/model_config.h"
#include "kernels/matmul.h"
#include "model/parallel_linear.h"
#include "model/weight_binder.h"

namespace kimi {

struct MlpWeights {  // SwiGLU: down(silu(gate(x)) * up(x))
  WeightMatrix gate, up, down;  // under TP: gate / up column-, down row-parallel
  RowParallelReduce reduce{};   // a dense MLP sums its own output; experts leave it to the MoE
};

struct AttentionWeights {  // multi-head latent attention
  WeightMatrix q_a, q_b;   // with q_lora_rank > 0
  std::vector<float> q_a_norm;
  WeightMatrix q_proj;     // with q_lora_rank == 0
  WeightMatrix kv_a;       // [kv_lora_rank + qk_rope_head_dim, hidden]: latent first, rope key last
  std::vector<float> kv_a_norm;
  WeightMatrix kv_b;       // [heads * (qk_nope + v), kv_lora_rank]: per head, key rows then value rows
  WeightMatrix o;           // under TP q_b / q_proj and kv_b hold this rank's heads, o their columns
  RowParallelReduce o_reduce;
};

struct MoeWeights {
  WeightMatrix router;                  // [n_routed_experts, hidden]
  std::vector<float> correction_bias;   // noaux_tc selection bias; empty otherwise
  // Routed experts first_expert, first_expert + 1, ...: all of them, or under expert parallelism
  // this rank's range (model/parallel_linear.h); the router still scores every expert.
  int64_t first_expert = 0;
  std::vector<MlpWeights> experts;
  std::optional<MlpWeights> shared;
  RowParallelReduce reduce;  // one sum over the TP group for the routed and shared experts together
  // Under data parallelism (model/parallel_linear.h): the group the tokens are gathered over, and
  // the sum of the routed outputs over all tp x dp ranks (then `reduce` sums the shared expert only).
  Communicator* data_parallel = nullptr;
  RowParallelReduce routed_reduce;  // its group: all tp x dp ranks, in world-rank order
  MoeExchange exchange = MoeExchange::AllGatherReduceScatter;
};

struct LayerWeights {
  std::vector<float> input_norm, post_attention_norm;
  AttentionWeights attn;
  std::optional<MlpWeights> dense;  // first_k_dense_replace layers
  std::optional<MoeWeights> moe;
};

struct ModelWeights {
  WeightMatrix embed;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  WeightMatrix lm_head;
  // Bytes of weights one decoded token reads (attention, dense/shared MLPs, top-k experts,
  // router, lm_head; not the embedding table): the numerator of the bandwidth roofline. Under
  // TP, this rank's shards; under EP its routed share is top_k * (owned / E) whole experts, what
  // a token reads here on average with uniform routing (the same bytes as top_k sliced experts).
  size_t active_bytes_per_token = 0;
  int64_t active_params_per_token = 0;  // the same matrices in elements (2 flops each per token)
  size_t total_bytes = 0;
  std::string storage;          // how the weights are stored / quantized, for the load summary
  OwnedWeightBuffers buffers;   // converted weights (repacked, quantized on load) the matrices point into
};

// Binds every tensor of text_model_layout(config), checking its shape; errors name the shard
// file and the tensor. Quantized checkpoints (model/weight_binder.h) load as stored, and float
// ones are quantized on load when `quant` asks. The checkpoint must outlive the returned weights.
// With a TP group the weights are this rank's shard (model/parallel_linear.h): attention by head,
// MLPs and every expert by intermediate width, embedding and lm_head by vocabulary (when it
// divides evenly; whole otherwise); router, norms and the MLA down-projections replicated.
// With tp.expert_parallel the routed experts are instead this rank's range of whole experts;
// the others are not bound, so their mapped bytes are never read.
ModelWeights load_weights(const Checkpoint& ckpt, const ModelConfig& config, const QuantizationRequest& quant = {},
                          const TensorParallel& tp = {});

// Binds one decoder layer's tensors, model.layers.<layer>.* (the dense MLP or the MoE that
// config.is_moe_layer(layer) says), through `binder`; an MTP layer's block (layer =
// num_hidden_layers) is bound this way. The converted weights stay in the binder's buffers.
LayerWeights load_layer_weights(WeightBinder& binder, const ModelConfig& config, int64_t layer);

}  // namespace kimi
