#pragma once
// Builds the proposer a --speculative-config names, for a target model whose KV cache has
// num_blocks blocks of block_size tokens in kv_dtype (a draft model's cache is laid out the same,
// its rows as narrow as the draft allows: Eagle3Config::draft_kv_element_bytes, MtpLayer).
#include <cstdint>
#include <memory>

#include "model/model.h"
#include "spec/proposer.h"
#include "spec/spec_config.h"

namespace kimi::spec {

// Bytes per token the proposer's own KV cache adds to the target's (0 for n-gram), read from the
// draft's config before anything is allocated, so that the KV budget covers both.
int64_t proposer_kv_bytes_per_token(const SpeculativeConfig& config, const ModelConfig& target, KvCacheDtype kv_dtype);

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, Model& target, int64_t num_blocks,
                                        int64_t block_size, KvCacheDtype kv_dtype);

}  // namespace kimi::spec
