#pragma once
// Bytes for what rank 0 sends its tensor-parallel workers each step: the SchedulerOutput (plain
// data already, see engine/scheduler_output.h) in a little-endian length-prefixed encoding of
// our own; and, from a data-parallel replica back to rank 0, its ModelRunnerOutput. A worker runs the same forward on its shard and drops its samples, so the sampling
// settings travel only as far as they shape the step (penalties, logprobs, seeds); stop strings
// and structured-output specs stay with rank 0.
#include <cstddef>
#include <span>
#include <vector>

#include "engine/model_runner.h"
#include "engine/scheduler_output.h"

namespace kimi {

std::vector<std::byte> encode_step(const SchedulerOutput& so);
// Throws kimi::Error on bytes that are not a whole encoded step.
SchedulerOutput decode_step(std::span<const std::byte> bytes);

// The KV cache's settings, the first thing a TP worker or a DP replica's leader is sent (it builds
// its runner with them): 17 bytes.
std::vector<std::byte> encode_kv_config(const KvCacheConfig& kv);
// Throws kimi::Error unless `bytes` is one encoded config.
KvCacheConfig decode_kv_config(std::span<const std::byte> bytes);

std::vector<std::byte> encode_runner_output(const ModelRunnerOutput& out);
// Throws kimi::Error on bytes that are not a whole encoded output.
ModelRunnerOutput decode_runner_output(std::span<const std::byte> bytes);

}  // namespace kimi
