// The kimi_k2 parsers on hostile input: random marker soup, random bytes, truncations, huge
// arguments. Nothing may crash (this runs under ASan+UBSan too), the stream must not depend on
// how the text is cut, and it must agree with the whole-text parse wherever it can.
#include <gtest/gtest.h>

#include <chrono>

#include "parser_test_util.h"

namespace kimi {
namespace {

using parser_test::cut;

// Pieces that recombine into well-formed, broken and truncated markup.
const std::vector<std::string>& alphabet() {
  static const std::vector<std::string> pieces = {
      "<think>",
      "</think>",
      "<|tool_calls_section_begin|>",
      "<|tool_calls_section_end|>",
      "<|tool_call_section_begin|>",
      "<|tool_call_section_end|>",
      "<|tool_call_begin|>",
      "<|tool_call_argument_begin|>",
      "<|tool_call_end|>",
      "<|tool_call",
      "<|tool_calls_sec",
      "</th",
      "<thi",
      "<|",
      "<",
      "|>",
      ">",
      "functions.get_weather:0",
      "a.b.c:12",
      "name:",
      ":",
      "0",
      "7",
      ".",
      " ",
      "\n",
      "\t",
      "{\"city\": \"NYC\"}",
      "{",
      "}",
      "\"",
      "x",
      "答",
      "\xff",
      std::string(1, '\0'),
  };
  return pieces;
}

// A plausible output: reasoning, content, then a section of calls.
std::string well_formed(Rng& rng) {
  std::string text = rng.next_u64() % 2 ? "<think>" : "";
  text += "thinking about it</think>Answer.";
  if (rng.next_u64() % 2)
    text += "<|tool_calls_section_begin|>";
  else
    text += "<|tool_call_section_begin|>";
  const size_t calls = rng.next_u64() % 4;
  for (size_t i = 0; i < calls; ++i)
    text += std::string("<|tool_call_begin|> functions.tool_") + std::to_string(i) + ":" + std::to_string(i) +
            "\n<|tool_call_argument_begin|>{\"k\": \"v <b>\",\n  \"n\": " + std::to_string(i) +
            "}  <|tool_call_end|>";
  return text + "<|tool_calls_section_end|>";
}

std::string random_piece(Rng& rng) {
  if (rng.next_u64() % 8 == 0) return std::string(1, char(rng.next_u64() & 0xff));  // any byte
  const auto& a = alphabet();
  return a[rng.next_u64() % a.size()];
}

// Marker soup, or a well-formed output with pieces inserted, deleted or replaced; then perhaps
// truncated.
std::string random_text(Rng& rng) {
  std::string text;
  if (rng.next_u64() % 2) {
    const size_t pieces = rng.next_u64() % 40;
    for (size_t i = 0; i < pieces; ++i) text += random_piece(rng);
  } else {
    text = well_formed(rng);
    const size_t edits = rng.next_u64() % 4;
    for (size_t i = 0; i < edits; ++i) {
      const size_t at = rng.next_u64() % (text.size() + 1);
      const size_t len = std::min<size_t>(text.size() - at, rng.next_u64() % 20);
      switch (rng.next_u64() % 3) {
        case 0:
          text.insert(at, random_piece(rng));
          break;
        case 1:
          text.erase(at, len);
          break;
        default:
          text.replace(at, len, random_piece(rng));
          break;
      }
    }
  }
  if (rng.next_u64() % 4 == 0 && !text.empty()) text.resize(rng.next_u64() % text.size());  // truncate
  return text;
}

void check_text(Rng& rng, const std::string& text) {
  for (const bool thinking : {true, false}) {
    const auto whole = KimiK2ReasoningParser(thinking).extract(text);
    for (int t = 0; t < 3; ++t) {
      const auto got = parser_test::stream_reasoning(
          thinking, cut(text, parser_test::random_cuts(rng, text.size(), 1 + rng.next_u64() % 12)));
      ASSERT_EQ(got.reasoning, whole.reasoning.value_or(""));
      ASSERT_EQ(got.content, whole.content);
    }
  }
  const auto whole = KimiK2ToolParser().extract(text);
  const auto once = parser_test::stream_tools(cut(text, {}));
  ASSERT_TRUE(once.well_formed);
  ASSERT_EQ(once.content, whole.content.value_or(""));
  ASSERT_TRUE(parser_test::same_calls(whole.calls, once.calls))
      << parser_test::describe(whole.calls) << " vs " << parser_test::describe(once.calls);
  for (int t = 0; t < 3; ++t) {
    const auto got = parser_test::stream_tools(
        cut(text, parser_test::random_cuts(rng, text.size(), 1 + rng.next_u64() % 12)));
    ASSERT_TRUE(got.well_formed);
    ASSERT_EQ(got.content, once.content);
    ASSERT_TRUE(parser_test::same_calls(got.calls, once.calls));
    ASSERT_EQ(got.saw_tool_calls, !got.calls.empty());
  }
}

TEST(ParsersFuzz, RandomMarkerSoup) {
  Rng rng(2024);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = random_text(rng);
    ASSERT_NO_FATAL_FAILURE(check_text(rng, text)) << "iteration " << i;
  }
}

TEST(ParsersFuzz, EveryTruncationOfAWellFormedOutput) {
  Rng rng(5);
  const std::string text =
      "<think>Weather and time needed.</think>Checking.<|tool_calls_section_begin|>\n"
      "<|tool_call_begin|> functions.get_weather:0 <|tool_call_argument_begin|> {\"city\": \"NYC\"} "
      "<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|"
      ">"
      "<|tool_calls_section_end|>";
  for (size_t n = 0; n <= text.size(); ++n) ASSERT_NO_FATAL_FAILURE(check_text(rng, text.substr(0, n))) << n;
}

TEST(ParsersFuzz, HugeArgumentsStreamInLinearTime) {
  // 2 MB of arguments (with whitespace runs and stray '<'), and 1 MB of whitespace, in small deltas.
  std::string args;
  while (args.size() < (2u << 20)) args += "{\"k\": \"v <x\",   \n\t \"n\": [1, 2, 3]} ";
  args += std::string(1u << 20, ' ') + "end";
  const std::string text =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0"
      "<|tool_call_argument_begin|>" +
      args + "<|tool_call_end|><|tool_calls_section_end|>";
  const auto start = std::chrono::steady_clock::now();
  KimiK2ToolParser p;
  parser_test::StreamedTools got;
  for (size_t at = 0; at < text.size(); at += 61)
    parser_test::assemble(got, p.push(std::string_view(text).substr(at, 61)));
  parser_test::assemble(got, p.finish());
  const auto whole = KimiK2ToolParser().extract(text);
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_TRUE(parser_test::same_calls(got.calls, whole.calls));
  EXPECT_EQ(got.calls[0].arguments, args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);  // linear: well under a second in Release
}

TEST(ParsersFuzz, ManyBrokenCallsParseInLinearTime) {
  // Each call lacks its end marker; a quadratic scan for it would take minutes.
  std::string text = "<|tool_calls_section_begin|>";
  for (int i = 0; i < 50000; ++i)
    text +=
        std::string("<|tool_call_begin|>functions.f:") + std::to_string(i) + "<|tool_call_argument_begin|>{}";
  const std::string tail = "<|tool_call_end|>";
  const auto start = std::chrono::steady_clock::now();
  const auto whole = KimiK2ToolParser().extract(text + tail);
  ASSERT_EQ(whole.calls.size(), 50000u);  // each cut short by the next, the last one ends
  EXPECT_EQ(whole.calls.back().id, "functions.f:49999");
  EXPECT_EQ(KimiK2ToolParser().extract(text).calls.size(), 50000u);
  // Streamed in one delta: every call is announced, and cut short by the next.
  KimiK2ToolParser p;
  parser_test::StreamedTools got;
  parser_test::assemble(got, p.push(text + tail));
  parser_test::assemble(got, p.finish());
  EXPECT_EQ(got.calls.size(), 50000u);
  EXPECT_TRUE(got.well_formed);
  // Long text without any marker, and an enormous id region.
  const std::string plain(4u << 20, 'a');
  EXPECT_EQ(KimiK2ReasoningParser().extract(plain).reasoning->size(), plain.size());
  EXPECT_EQ(
      KimiK2ToolParser().extract("<|tool_calls_section_begin|><|tool_call_begin|>" + plain).calls.size(), 0u);
  KimiK2ToolParser q;
  for (size_t at = 0; at < plain.size(); at += 4096) q.push(std::string_view(plain).substr(at, 4096));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);
}

}  // namespace
}  // namespace kimi
