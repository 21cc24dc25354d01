#include "bench/serve_spec_metrics.h"

#include <cstdio>
#include <cstdlib>

namespace kimi {

namespace {

// "prefix:spec_decode_<what>[_total]{labels} value" -> what, labels, value.
bool parse_line(std::string_view line, std::string& what, std::string_view& labels, double& value) {
  const size_t colon = line.find(':');
  if (line.empty() || line[0] == '#' || colon == std::string_view::npos) return false;
  std::string_view name = line.substr(colon + 1);
  constexpr std::string_view kStem = "spec_decode_";
  if (name.substr(0, kStem.size()) != kStem) return false;
  name.remove_prefix(kStem.size());
  const size_t end = name.find_first_of("{ ");
  if (end == std::string_view::npos) return false;
  what = std::string(name.substr(0, end));
  if (what.size() > 6 && what.compare(what.size() - 6, 6, "_total") == 0) what.resize(what.size() - 6);
  labels = {};
  std::string_view rest = name.substr(end);
  if (!rest.empty() && rest[0] == '{') {
    const size_t close = rest.find('}');
    if (close == std::string_view::npos) return false;
    labels = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
  }
  const std::string number(rest);
  char* stop = nullptr;
  value = std::strtod(number.c_str(), &stop);
  return stop != number.c_str();
}

int position_of(std::string_view labels) {
  const size_t at = labels.find("position=\"");
  if (at == std::string_view::npos) return -1;
  return std::atoi(std::string(labels.substr(at + 10)).c_str());
}

}  // namespace

std::optional<SpecDecodeCounters> parse_spec_decode_counters(std::string_view text) {
  SpecDecodeCounters c;
  bool any = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    std::string what;
    std::string_view labels;
    double v = 0;
    if (!parse_line(line, what, labels, v)) continue;
    any = true;
    if (what == "num_drafts") c.drafts += v;
    else if (what == "num_draft_tokens") c.draft_tokens += v;
    else if (what == "num_accepted_tokens") c.accepted_tokens += v;
    else if (what == "num_accepted_tokens_per_pos") {
      const int pos = position_of(labels);
      if (pos < 0 || pos > 1024) continue;
      if (c.accepted_per_pos.size() <= size_t(pos)) c.accepted_per_pos.resize(size_t(pos) + 1);
      c.accepted_per_pos[size_t(pos)] += v;
    }
  }
  if (!any) return std::nullopt;
  return c;
}

SpecDecodeStats spec_decode_delta(const SpecDecodeCounters& before, const SpecDecodeCounters& after) {
  SpecDecodeStats s;
  s.drafts = int64_t(after.drafts - before.drafts);
  s.draft_tokens = int64_t(after.draft_tokens - before.draft_tokens);
  s.accepted_tokens = int64_t(after.accepted_tokens - before.accepted_tokens);
  if (s.draft_tokens > 0) s.acceptance_rate = double(s.accepted_tokens) / double(s.draft_tokens);
  if (s.drafts > 0) {
    s.acceptance_length = 1.0 + double(s.accepted_tokens) / double(s.drafts);
    for (size_t j = 0; j < after.accepted_per_pos.size(); ++j) {
      const double b = j < before.accepted_per_pos.size() ? before.accepted_per_pos[j] : 0.0;
      s.per_position_rate.push_back((after.accepted_per_pos[j] - b) / double(s.drafts));
    }
  }
  return s;
}

std::string format_spec_decode_stats(const SpecDecodeStats& s) {
  std::string out = "---------------Speculative Decoding---------------\n";
  char line[128];
  std::snprintf(line, sizeof line, "%-40s%-10.2f\n", "Acceptance rate (%):", 100.0 * s.acceptance_rate);
  out += line;
  std::snprintf(line, sizeof line, "%-40s%-10.2f\n", "Acceptance length:", s.acceptance_length);
  out += line;
  std::snprintf(line, sizeof line, "%-40s%-10lld\n", "Drafts:", (long long)s.drafts);
  out += line;
  std::snprintf(line, sizeof line, "%-40s%-10lld\n", "Draft tokens:", (long long)s.draft_tokens);
  out += line;
  std::snprintf(line, sizeof line, "%-40s%-10lld\n", "Accepted tokens:", (long long)s.accepted_tokens);
  out += line;
  out += "Per-position acceptance (%):";
  for (double r : s.per_position_rate) {
    std::snprintf(line, sizeof line, " %.2f", 100.0 * r);
    out += line;
  }
  out += "\n";
  return out;
}

}  // namespace kimi
