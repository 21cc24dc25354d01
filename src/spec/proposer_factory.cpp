#include "spec/proposer_factory.h"

#include "common/error.h"
#include "model/mtp_layer.h"
#include "spec/eagle3_proposer.h"
#include "spec/mtp_proposer.h"
#include "spec/ngram_proposer.h"

namespace kimi::spec {

int64_t proposer_kv_bytes_per_token(const SpeculativeConfig& c, const ModelConfig& target, KvCacheDtype kv_dtype) {
  if (c.method == Method::Eagle3) return Eagle3Config::load(c.model, target).kv_bytes_per_token(kv_dtype);
  if (c.method == Method::Mtp) return MtpLayer::kv_bytes_per_token(target, kv_dtype);
  return 0;
}

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& c, Model& target, int64_t num_blocks,
                                        int64_t block_size, KvCacheDtype kv_dtype) {
  switch (c.method) {
    case Method::Ngram: return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
    case Method::Eagle3:
      // The draft shares the target's threads and, when it has none of its own, its embeddings.
      return std::make_unique<Eagle3Proposer>(c.model, target.config(), target.pool(),
                                              Eagle3ProposerOptions{num_blocks, block_size, &target.weights().embed, kv_dtype,
                                                                    target.bf16_activations()});
    case Method::Mtp:
      // The target's own checkpoint holds the layer; it shares the target's threads, embedding
      // (when it has none of its own) and final norm.
      return std::make_unique<MtpProposer>(
          target.dir(), target.config(), target.pool(),
          MtpProposerOptions{num_blocks, block_size, &target.weights().embed, target.weights().final_norm, kv_dtype,
                             target.bf16_activations()});
    case Method::None: return nullptr;
  }
  throw Error(std::string("internal: no proposer for method ") + method_name(c.method));
}

}  // namespace kimi::spec
