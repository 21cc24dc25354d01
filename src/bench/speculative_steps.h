#pragma once
// The step times a speculative variant of `kimi bench latency` is made of, measured alone at the
// prompt's context: a plain target step (1 token), a verification step (k + 1 tokens) and a draft
// step (the proposer drafting one token for one sequence); and the decode time they predict for
// the drafts the engine actually made, so that the engine's own overhead shows as the gap.
#include <cstdint>
#include <vector>

#include "bench/latency.h"

namespace kimi {

// Fills r.speculative's step times and prediction; r.speculative's draft counts and
// r.decode_seconds must already hold the variant's measured run.
void measure_speculative_steps(Model& model, const spec::SpeculativeConfig& config, const std::vector<int32_t>& prompt,
                               const LatencyOptions& o, LatencyResult& r);

}  // namespace kimi
