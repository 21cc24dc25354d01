// The kimi_k2 tool-call parser: whole-text cases as vLLM parses them, the shape of the streamed
// deltas, and the streamed result equals the whole-text one however the text is cut into deltas.
#include <gtest/gtest.h>

#include "parser_test_util.h"

namespace kimi {
namespace {

using Call = KimiK2ToolParser::ToolCall;
using parser_test::cut;

const std::string kSection = "<|tool_calls_section_begin|>";
const std::string kSectionEnd = "<|tool_calls_section_end|>";

std::string call(std::string_view id, std::string_view args) {
  std::string s = "<|tool_call_begin|>";
  s.append(id).append("<|tool_call_argument_begin|>").append(args).append("<|tool_call_end|>");
  return s;
}

std::string section(const std::string& calls) { return kSection + calls + kSectionEnd; }

void expect_calls(const std::vector<Call>& got, const std::vector<Call>& want) {
  EXPECT_TRUE(parser_test::same_calls(got, want))
      << "got " << parser_test::describe(got) << "\nwant " << parser_test::describe(want);
}

TEST(ToolParser, NoSectionIsPlainContent) {
  const KimiK2ToolParser p;
  auto r = p.extract("Just an answer.");
  EXPECT_EQ(r.content, "Just an answer.");
  EXPECT_TRUE(r.calls.empty());
  // Call markers outside a section are text.
  const std::string stray = std::string("a") + call("functions.f:0", "{}");
  r = p.extract(stray);
  EXPECT_EQ(r.content, stray);
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolParser, SingleCall) {
  const auto r = KimiK2ToolParser().extract(section(call("functions.get_weather:0", R"({"city": "NYC"})")));
  EXPECT_EQ(r.content, std::nullopt);
  expect_calls(r.calls, {{"functions.get_weather:0", "get_weather", R"({"city": "NYC"})"}});
}

TEST(ToolParser, MultipleCallsAndContentBefore) {
  const std::string text =
      std::string("Let me check both.") + section(call("functions.get_weather:0", R"({"city": "NYC"})") +
                                                  call("functions.get_time:1", R"({"tz": "EST"})"));
  const auto r = KimiK2ToolParser().extract(text);
  EXPECT_EQ(r.content, "Let me check both.");
  expect_calls(r.calls, {{"functions.get_weather:0", "get_weather", R"({"city": "NYC"})"},
                         {"functions.get_time:1", "get_time", R"({"tz": "EST"})"}});
}

TEST(ToolParser, NamesFollowVllmRule) {
  const auto r =
      KimiK2ToolParser().extract(section(call("functions.a.b.func:1", "{}") + call("get_weather:0", "{}") +
                                         call("ns:sub:7", "{}") + call("x.:2", "{}")));
  expect_calls(r.calls, {{"functions.a.b.func:1", "func", "{}"},
                         {"get_weather:0", "get_weather", "{}"},
                         {"ns:sub:7", "ns", "{}"},
                         {"x.:2", "", "{}"}});
}

TEST(ToolParser, WhitespaceAroundIdsAndArgumentsIsTrimmed) {
  const std::string text = kSection +
                           "\n<|tool_call_begin|> \n functions.search:12 \n<|tool_call_argument_begin|>\n  " +
                           "{\n  \"q\":  \"a  b\"\n}\n \n<|tool_call_end|>\n" + kSectionEnd;
  const auto r = KimiK2ToolParser().extract(text);
  expect_calls(r.calls, {{"functions.search:12", "search", "{\n  \"q\":  \"a  b\"\n}"}});
}

TEST(ToolParser, ArgumentsAreRawText) {
  const auto r = KimiK2ToolParser().extract(
      section(call("functions.f:0", "not json <b> <|im_end <|tool_call_argument_begin|>") +
              call("functions.g:1", "")));
  expect_calls(r.calls, {{"functions.f:0", "f", "not json <b> <|im_end <|tool_call_argument_begin|>"},
                         {"functions.g:1", "g", ""}});
}

TEST(ToolParser, SingularSectionMarker) {
  const auto r = KimiK2ToolParser().extract(std::string("hi<|tool_call_section_begin|>") +
                                            call("functions.f:0", "{}") + "<|tool_call_section_end|>");
  EXPECT_EQ(r.content, "hi");
  expect_calls(r.calls, {{"functions.f:0", "f", "{}"}});
}

TEST(ToolParser, InvalidIdsAreSkipped) {
  const std::string text =
      section(call("no_index", "{}") + call("functions.f:x", "{}") + call("fun<c:0", "{}") +
              call(":0", "{}") + call("  ", "{}") + call("functions.ok:3", "{\"a\": 1}") +
              call("functions.f:0 trailing", "{}") + call(std::string(2000, 'x') + ":0", "{}"));
  const auto r = KimiK2ToolParser().extract(text);
  expect_calls(r.calls, {{"functions.ok:3", "ok", "{\"a\": 1}"}});
}

TEST(ToolParser, MissingEndMarkers) {
  const KimiK2ToolParser p;
  // Truncated in the arguments: the call is kept with the arguments seen so far.
  auto r = p.extract("c" + kSection + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\" ");
  EXPECT_EQ(r.content, "c");
  expect_calls(r.calls, {{"functions.f:0", "f", "{\"a\""}});
  // Truncated right after the argument marker: a call with empty arguments.
  r = p.extract(kSection + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|> ");
  expect_calls(r.calls, {{"functions.f:0", "f", ""}});
  // Truncated before the arguments: no call yet.
  r = p.extract(kSection + "<|tool_call_begin|>functions.f:0<|tool_call_arg");
  EXPECT_TRUE(r.calls.empty());
  // A call cut short by the next one keeps what it had; the next one is parsed.
  r = p.extract(kSection + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{" +
                call("functions.g:1", "{\"b\": 2}"));
  expect_calls(r.calls, {{"functions.f:0", "f", "{"}, {"functions.g:1", "g", "{\"b\": 2}"}});
  // No section end marker: the calls still count.
  r = p.extract(kSection + call("functions.f:0", "{}"));
  expect_calls(r.calls, {{"functions.f:0", "f", "{}"}});
  // A section with no call.
  r = p.extract("text" + kSection);
  EXPECT_EQ(r.content, "text");
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolParser, NothingAfterTheSectionIsContent) {
  // vLLM's whole-text content is the text before the first section; calls in a later section count.
  std::string text = "a";
  text += section(call("functions.f:0", "{}")) + "between" + section(call("functions.g:1", "[]")) + "after";
  const auto r = KimiK2ToolParser().extract(text);
  EXPECT_EQ(r.content, "a");
  expect_calls(r.calls, {{"functions.f:0", "f", "{}"}, {"functions.g:1", "g", "[]"}});
}

TEST(ToolParser, StreamAnnouncesACallThenStreamsItsArguments) {
  KimiK2ToolParser p;
  auto d = p.push("Checking.<|tool_calls_sec");
  EXPECT_EQ(d.content, "Checking.");
  EXPECT_TRUE(d.tool_calls.empty());
  d = p.push("tion_begin|> <|tool_call_begin|>functions.get_weather:0<|tool_call_arg");
  EXPECT_EQ(d.content, "");  // markers and header noise never leak
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_FALSE(p.saw_tool_calls());
  d = p.push("ument_begin|>{\"city\": ");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\":");  // the trailing space waits
  EXPECT_TRUE(p.saw_tool_calls());
  d = p.push("\"NYC\"}<|tool_call_e");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].id, std::nullopt);
  EXPECT_EQ(d.tool_calls[0].name, std::nullopt);
  EXPECT_EQ(d.tool_calls[0].arguments, " \"NYC\"}");
  d = p.push("nd|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 1);
  EXPECT_EQ(d.tool_calls[0].id, "functions.get_time:1");
  EXPECT_EQ(d.tool_calls[0].arguments, "{}");
  d = p.push("<|tool_calls_section_end|>");
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "");
  d = p.finish();
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "");
}

TEST(ToolParser, StreamAndWholeTextAgreeOnACallCutShort) {
  // Issue 19, defect 4: the stream cannot take back a call it announced, so a call truncated (by
  // max_tokens or a stop string) or interrupted by the next <|tool_call_begin|> stays, with the
  // arguments seen so far, and the whole-text parse must report the same calls (it used to drop
  // them: no call and finish_reason "stop" without streaming, a call and "tool_calls" streamed).
  const std::string truncated =
      kSection + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1 ";
  const std::string stopped = kSection + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>";
  const std::string interrupted = kSection +
                                  "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|> {\"a\" " +
                                  call("functions.g:1", "{}");
  const std::vector<std::pair<std::string, std::vector<KimiK2ToolParser::ToolCall>>> cases = {
      {truncated, {{"functions.f:0", "f", "{\"a\": 1"}}},
      {stopped, {{"functions.f:0", "f", ""}}},
      {interrupted, {{"functions.f:0", "f", "{\"a\""}, {"functions.g:1", "g", "{}"}}},
  };
  for (const auto& [text, expected] : cases) {
    const auto whole = KimiK2ToolParser().extract(text);
    expect_calls(whole.calls, expected);
    for (size_t i = 0; i <= text.size(); ++i) {
      const auto s = parser_test::stream_tools(cut(text, {i}));
      EXPECT_TRUE(s.well_formed);
      EXPECT_TRUE(s.saw_tool_calls);
      expect_calls(s.calls, expected);
    }
  }
}

// Texts in which every announced call is completed, so stream and whole text agree exactly.
std::vector<std::string> stream_texts() {
  const std::string weather = call("functions.get_weather:0", R"({"city": "NYC", "unit": "celsius"})");
  return {
      "",
      "Plain answer with <b>tags</b> and <|im_end and <|tool_calls_sec fragments.",
      section(call("functions.get_weather:0", R"({"city": "NYC"})")),
      std::string("Let me check.") + section(weather + call("functions.get_time:1", R"({"tz": "EST"})")),
      section(call("functions.a.b.func:1", "{}") + call("get_weather:0", "[1, 2]")),
      kSection +
          "\n<|tool_call_begin|> \n functions.search:12 \n<|tool_call_argument_begin|>\n  {\n  \"q\": \"a  "
          "b\"\n}\n \n<|tool_call_end|>\n" +
          kSectionEnd,
      section(call("functions.f:0", "x < y <|tool_c <|tool_call_e <| <")),
      section(call("functions.f:0", "") + call("functions.g:1", "   ")),
      "hi<|tool_call_section_begin|>" + weather + "<|tool_call_section_end|>",
      kSection + " header noise " + weather + " between " + weather + kSectionEnd + " after",
      section(call("no_index", "{}") + call("fun<c:0", "{}") + call("f:0 x", "{}") + weather),
      section(call("functions.f:0", "{}")) + "more" + section(call("functions.g:1", "{}")),
      "text" + kSection,
      "text" + kSection + "<|tool_call_begin|>functions.f:0",
      "text" + kSection + "<|tool_call_begin|>functions.f:0<|tool_call_argum",
      "<|tool_calls_section_begin|",
      "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>" + kSection,
      std::string("天气如何？") + section(call("functions.天气:0", R"({"城市": "北京"})")),
      section("<|tool_call_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_"
              "end|>"),
  };
}

void check_stream(const std::string& text, const std::vector<size_t>& cuts) {
  const auto expected = KimiK2ToolParser().extract(text);
  const auto got = parser_test::stream_tools(cut(text, cuts));
  ASSERT_TRUE(got.well_formed) << text;
  ASSERT_EQ(got.content, expected.content.value_or("")) << text;
  ASSERT_TRUE(parser_test::same_calls(got.calls, expected.calls))
      << text << "\ngot " << parser_test::describe(got.calls) << "\nwant "
      << parser_test::describe(expected.calls);
  ASSERT_EQ(got.saw_tool_calls, !expected.calls.empty()) << text;
}

TEST(ToolParser, StreamEqualsWholeTextForEverySplit) {
  for (const std::string& text : stream_texts()) {
    check_stream(text, {});
    check_stream(text, parser_test::every_byte(text.size()));
    for (size_t i = 0; i <= text.size(); ++i) check_stream(text, {i});
    // Every pair of cuts for the shorter texts.
    if (text.size() <= 200)
      for (size_t i = 0; i <= text.size(); ++i)
        for (size_t j = i; j <= text.size(); j += 3) check_stream(text, {i, j});
  }
}

TEST(ToolParser, StreamEqualsWholeTextForRandomSplitsOfLongText) {
  Rng rng(11);
  std::string text = "Some content first. ";
  for (int i = 0; i < 40; ++i) text += std::string("line ") + std::to_string(i) + " <b> ";
  text += kSection;
  for (int i = 0; i < 60; ++i) {
    std::string args = std::string("{\"i\": ") + std::to_string(i) + ", \"text\": \"";
    for (int k = 0; k < i * 7; ++k) args += k % 5 == 0 ? "  \n" : "ab<c";
    args += "\"}  ";
    text += '\n';
    text += call("functions.tool_" + std::to_string(i % 7) + ":" + std::to_string(i), args);
  }
  text += kSectionEnd;
  const auto expected = KimiK2ToolParser().extract(text);
  ASSERT_EQ(expected.calls.size(), 60u);
  for (int trial = 0; trial < 40; ++trial)
    check_stream(text, parser_test::random_cuts(rng, text.size(), 1 + size_t(trial) * 3));
}

}  // namespace
}  // namespace kimi
