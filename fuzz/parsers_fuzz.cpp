// The kimi_k2 reasoning and tool-call parsers on fuzzer text: the streamed result, with the text
// cut at fuzzer-chosen points (and byte by byte), must equal the whole-text result, as serving
// chains them (reasoning first, its content into the tool parser); the whole-text results must
// be consistent with the text they came from; the stream's chunks must follow the OpenAI rules
// (a new call index comes in order with its id and name, later deltas carry arguments only).
//
// Input: byte 0 = flags (bit 0: thinking off, bit 1: reasoning parser off), byte 1 = number of
// cut lengths that follow (at most 32), one byte each (a piece of that many bytes; 0 = an empty
// delta); the rest is the model's text.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "server/parsers/reasoning_parser.h"
#include "server/parsers/tool_parser.h"

namespace {

using kimi::KimiK2ReasoningParser;
using kimi::KimiK2ToolParser;

struct Streamed {
  std::string reasoning, content;
  std::vector<KimiK2ToolParser::ToolCall> calls;
  bool saw_tool_calls = false;
};

std::string describe(const std::vector<KimiK2ToolParser::ToolCall>& calls) {
  std::string s;
  for (const auto& c : calls) s += "[" + c.id + " | " + c.name + " | " + c.arguments + "]\n";
  return s;
}

void assemble(Streamed& out, const KimiK2ToolParser::StreamDelta& d) {
  out.content += d.content;
  for (const auto& c : d.tool_calls) {
    if (c.index == int(out.calls.size())) {
      KIMI_FUZZ_CHECK(c.id && c.name, "a new call index without its id and name");
      out.calls.push_back({*c.id, *c.name, c.arguments});
    } else {
      KIMI_FUZZ_CHECK(c.index == int(out.calls.size()) - 1 && !c.id && !c.name && !c.arguments.empty(),
                      "a call delta out of order, repeating its id or name, or empty");
      out.calls.back().arguments += c.arguments;
    }
  }
}

Streamed stream(const std::vector<std::string_view>& pieces, bool reasoning, bool thinking) {
  KimiK2ReasoningParser rp(thinking);
  KimiK2ToolParser tp;
  Streamed out;
  auto feed = [&](std::string_view piece, bool final) {
    std::string content(piece);
    if (reasoning) {
      auto d = rp.push(piece);
      if (final) {
        const auto f = rp.finish();
        d.reasoning += f.reasoning;
        d.content += f.content;
      }
      out.reasoning += d.reasoning;
      content = d.content;
    }
    assemble(out, tp.push(content));
    if (final) assemble(out, tp.finish());
  };
  for (size_t i = 0; i < pieces.size(); ++i) feed(pieces[i], i + 1 == pieces.size());
  if (pieces.empty()) feed({}, true);
  out.saw_tool_calls = tp.saw_tool_calls();
  return out;
}

bool same(const std::vector<KimiK2ToolParser::ToolCall>& a, const std::vector<KimiK2ToolParser::ToolCall>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].name != b[i].name || a[i].arguments != b[i].arguments) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kimi::fuzz::Input in(data, size);
  const uint8_t flags = in.byte();
  const bool thinking = !(flags & 1), reasoning = !(flags & 2);
  std::vector<size_t> lengths(std::min<size_t>(in.byte(), 32));
  for (size_t& n : lengths) n = in.byte();
  const std::string_view text = in.rest();

  // Whole text, as the non-streaming path does it.
  std::string reasoning_text;
  std::string_view content = text;
  std::string content_store;
  if (reasoning) {
    const auto r = KimiK2ReasoningParser(thinking).extract(text);
    KIMI_FUZZ_CHECK(r.reasoning.has_value() == thinking, "reasoning present iff thinking");
    KIMI_FUZZ_CHECK(r.reasoning.value_or("").size() + r.content.size() <= text.size(), "reasoning invents text");
    reasoning_text = r.reasoning.value_or("");
    content_store = r.content;
    content = content_store;
  }
  const auto whole = KimiK2ToolParser().extract(content);
  if (whole.content) KIMI_FUZZ_CHECK(content.starts_with(*whole.content), "content is not a prefix");
  KIMI_FUZZ_CHECK(whole.content || !whole.calls.empty() || content.find("_section_begin|>") != std::string_view::npos,
                  "content missing without a section");
  for (const auto& c : whole.calls) {
    KIMI_FUZZ_CHECK(c.arguments.find("<|tool_call_begin|>") == std::string::npos, "arguments hold a call marker");
    KIMI_FUZZ_CHECK(c.arguments.find("<|tool_call_end|>") == std::string::npos, "arguments hold an end marker");
    KIMI_FUZZ_CHECK(c.name.find(':') == std::string::npos && c.name.find('.') == std::string::npos, c.name);
    KIMI_FUZZ_CHECK(content.find(c.id) != std::string_view::npos, c.id);
  }

  // Streamed: at the fuzzer's cut points (the rest in one piece), then byte by byte.
  std::vector<std::string_view> pieces;
  size_t at = 0;
  for (size_t n : lengths) {
    const size_t len = std::min(n, text.size() - at);
    pieces.push_back(text.substr(at, len));
    at += len;
  }
  pieces.push_back(text.substr(at));
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));

  for (const auto& split : {pieces, bytes}) {
    const Streamed s = stream(split, reasoning, thinking);
    KIMI_FUZZ_CHECK(s.reasoning == reasoning_text, "streamed reasoning differs:\n" + s.reasoning + "\nvs\n" + reasoning_text);
    KIMI_FUZZ_CHECK(s.content == whole.content.value_or(""),
                    "streamed content differs:\n" + s.content + "\nvs\n" + whole.content.value_or(""));
    KIMI_FUZZ_CHECK(same(s.calls, whole.calls), "streamed calls differ:\n" + describe(s.calls) + "vs\n" + describe(whole.calls));
    KIMI_FUZZ_CHECK(s.saw_tool_calls == !whole.calls.empty(), "saw_tool_calls (finish_reason) differs");
  }
  return 0;
}
