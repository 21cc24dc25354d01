#pragma once
// Builds the proposer a --speculative-config names, for a target model whose KV cache has
// num_blocks blocks of block_size tokens (a draft model's cache is laid out the same).
#include <cstdint>
#include <memory>

#include "model/model.h"
#include "spec/proposer.h"
#include "spec/spec_config.h"

namespace kimi::spec {

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, Model& target, int64_t num_blocks,
                                        int64_t block_size);

}  // namespace kimi::spec
