#pragma once
// --speculative-config: vLLM's JSON object (method, model, num_speculative_tokens,
// prompt_lookup_max / prompt_lookup_min, draft_tensor_parallel_size) plus our
// disable_by_batch_size, parsed and checked against the target model at start-up, so that a
// typo or a draft that does not fit is a clear error before anything is served.
#include <cstdint>
#include <filesystem>
#include <string>

#include "format/model_config.h"

namespace kimi::spec {

enum class Method { None, Ngram, Eagle3, Mtp };
const char* method_name(Method m);  // "ngram", "eagle3", "mtp" (vLLM's spellings)

struct SpeculativeConfig {
  Method method = Method::None;
  std::filesystem::path model;        // the draft's directory (eagle3)
  int64_t num_speculative_tokens = 0;  // draft tokens verified per step
  int64_t prompt_lookup_max = 5;       // n-gram window, longest tried first
  int64_t prompt_lookup_min = 5;
  int64_t draft_tensor_parallel_size = 1;
  // Speculation pauses while more sequences than this are scheduled in one step (a batch that
  // already fills the machine gains nothing from verifying drafts). 0: never pauses. When the
  // JSON does not give it, parse_speculative_config sets default_disable_by_batch_size(method).
  int64_t disable_by_batch_size = 0;
  bool enabled() const { return method != Method::None; }
};

// The default of disable_by_batch_size, from `kimi bench throughput` on the trained mini pair
// (bench/results/2026-12-06-speculation-crossover.md): a draft model (eagle3, mtp) costs a forward
// per draft token and a verification several target tokens, and paid only with one sequence
// (1.11-1.19x with one draft token; 0.80-0.93x from two sequences up), so it pauses above 1;
// n-gram lookup costs no forward and drafts only on a match, and never lost beyond the noise
// (0.97-1.28x from 1 to 16 sequences), so it never pauses.
int64_t default_disable_by_batch_size(Method m);

// Parses the JSON text of --speculative-config; throws kimi::Error naming the offending key or
// value (unknown keys and methods included). An empty string gives a disabled config.
SpeculativeConfig parse_speculative_config(const std::string& json_text);

// Checks the parts that depend on the target (a draft directory that exists, a method the
// checkpoint supports); the draft's own shapes are checked when it loads.
void check_against_target(const SpeculativeConfig& c, const ModelConfig& target);

}  // namespace kimi::spec
