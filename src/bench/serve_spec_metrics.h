#pragma once
// `kimi bench serve` and speculative decoding: the server's spec_decode counters (Prometheus
// text from /metrics, kimi: or vllm: names) read before and after a run, as vLLM's bench does,
// so that the run reports its own drafts, acceptance rate and length, and per-position rates.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

struct SpecDecodeCounters {
  double drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::vector<double> accepted_per_pos;  // by position label
};

// The counters in a Prometheus exposition, summed over label sets other than position; nullopt
// when it has none (a server without speculative decoding).
std::optional<SpecDecodeCounters> parse_spec_decode_counters(std::string_view prometheus_text);

struct SpecDecodeStats {
  int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  double acceptance_rate = 0;    // accepted / draft tokens
  double acceptance_length = 0;  // 1 + accepted / drafts
  std::vector<double> per_position_rate;  // accepted at position j / drafts
};

// What happened between two readings.
SpecDecodeStats spec_decode_delta(const SpecDecodeCounters& before, const SpecDecodeCounters& after);
std::string format_spec_decode_stats(const SpecDecodeStats& s);

}  // namespace kimi
