#include "spec/proposer_factory.h"

#include "common/error.h"
#include "spec/ngram_proposer.h"

namespace kimi::spec {

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& c, Model& target, int64_t num_blocks,
                                        int64_t block_size) {
  (void)target;
  (void)num_blocks;
  (void)block_size;
  switch (c.method) {
    case Method::Ngram: return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
    case Method::None: return nullptr;
    default: break;
  }
  throw Error(std::string("--speculative-config: method ") + method_name(c.method) + " is not supported yet");
}

}  // namespace kimi::spec
