#pragma once
// Helpers for the kimi_k2 parser tests: cutting a text into stream deltas, and feeding them
// through the streaming parsers to compare with the whole-text results.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/rng.h"
#include "server/parsers/reasoning_parser.h"
#include "server/parsers/tool_parser.h"

namespace kimi::parser_test {

// The text cut at the given (sorted) byte offsets.
inline std::vector<std::string_view> cut(std::string_view text, const std::vector<size_t>& cuts) {
  std::vector<std::string_view> pieces;
  size_t from = 0;
  for (size_t c : cuts) {
    pieces.push_back(text.substr(from, c - from));
    from = c;
  }
  pieces.push_back(text.substr(from));
  return pieces;
}

// Random cuts with pieces of 1..max_piece bytes (and the odd empty delta).
inline std::vector<size_t> random_cuts(Rng& rng, size_t size, size_t max_piece) {
  std::vector<size_t> cuts;
  size_t at = 0;
  while (true) {
    const size_t step = rng.next_u64() % 16 == 0 ? 0 : 1 + rng.next_u64() % max_piece;
    at += step;
    if (at >= size) break;
    cuts.push_back(at);
  }
  return cuts;
}

inline std::vector<size_t> every_byte(size_t size) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < size; ++i) cuts.push_back(i);
  return cuts;
}

struct StreamedReasoning {
  std::string reasoning, content;
};

inline StreamedReasoning stream_reasoning(bool thinking, const std::vector<std::string_view>& pieces) {
  KimiK2ReasoningParser parser(thinking);
  StreamedReasoning out;
  for (std::string_view piece : pieces) {
    const auto d = parser.push(piece);
    out.reasoning += d.reasoning;
    out.content += d.content;
  }
  const auto d = parser.finish();
  out.reasoning += d.reasoning;
  out.content += d.content;
  return out;
}

struct StreamedTools {
  std::string content;
  std::vector<KimiK2ToolParser::ToolCall> calls;
  bool saw_tool_calls = false;
  bool well_formed = true;  // every delta followed the OpenAI chunk rules checked below
};

// Assembles the stream as a client would: a new index must come next in order with its id and
// name; later deltas for it carry only argument fragments.
inline void assemble(StreamedTools& out, const KimiK2ToolParser::StreamDelta& d) {
  out.content += d.content;
  for (const auto& c : d.tool_calls) {
    if (c.index == int(out.calls.size())) {
      if (!c.id || !c.name) out.well_formed = false;
      out.calls.push_back({c.id.value_or(""), c.name.value_or(""), c.arguments});
    } else if (c.index == int(out.calls.size()) - 1 && !c.id && !c.name && !c.arguments.empty()) {
      out.calls.back().arguments += c.arguments;
    } else {
      out.well_formed = false;
    }
  }
}

inline StreamedTools stream_tools(const std::vector<std::string_view>& pieces) {
  KimiK2ToolParser parser;
  StreamedTools out;
  for (std::string_view piece : pieces) assemble(out, parser.push(piece));
  assemble(out, parser.finish());
  out.saw_tool_calls = parser.saw_tool_calls();
  return out;
}

inline bool same_calls(const std::vector<KimiK2ToolParser::ToolCall>& a,
                       const std::vector<KimiK2ToolParser::ToolCall>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].name != b[i].name || a[i].arguments != b[i].arguments) return false;
  return true;
}

inline std::string describe(const std::vector<KimiK2ToolParser::ToolCall>& calls) {
  std::string s;
  for (const auto& c : calls) s += "[" + c.id + " | " + c.name + " | " + c.arguments + "]";
  return s;
}

}  // namespace kimi::parser_test
