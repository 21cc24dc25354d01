// The kimi_k2 reasoning parser: whole-text cases, and the streamed result equals the whole-text
// one however the text is cut into deltas.
#include <gtest/gtest.h>

#include "parser_test_util.h"

namespace kimi {
namespace {

using parser_test::cut;

const std::string kSection = "<|tool_calls_section_begin|>";

struct ParserCase {
  std::string text;
  std::optional<std::string> reasoning;
  std::string content;
};

void expect_extract(const KimiK2ReasoningParser& p, const ParserCase& c) {
  const auto r = p.extract(c.text);
  EXPECT_EQ(r.reasoning, c.reasoning) << c.text;
  EXPECT_EQ(r.content, c.content) << c.text;
}

TEST(ReasoningParser, WholeText) {
  const KimiK2ReasoningParser p;
  const std::string call = "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>";
  const std::vector<ParserCase> cases = {
      {"<think>Let me think.</think>The answer is 4.", "Let me think.", "The answer is 4."},
      // The K2.5 prompt ends with <think>: the output starts with the reasoning itself.
      {"Let me think.</think>The answer is 4.", "Let me think.", "The answer is 4."},
      {"still thinking", "still thinking", ""},
      {"<think>still thinking", "still thinking", ""},
      {"", "", ""},
      {"<think>", "", ""},
      {"</think>", "", ""},
      {"</think>all content", "", "all content"},
      {"<think></think>", "", ""},
      // Only a leading <think> is dropped.
      {" <think>x</think>y", " <think>x", "y"},
      {"a<think>b</think>c", "a<think>b", "c"},
      // A tool section ends the reasoning and stays in the content for the tool parser.
      {"Need a tool." + kSection + call, "Need a tool.", kSection + call},
      {"<think>r" + kSection, "r", kSection},
      // The earlier of the two markers ends the reasoning.
      {"r</think>c" + kSection + "s", "r", "c" + kSection + "s"},
      {"r" + kSection + "s</think>c", "r", kSection + "s</think>c"},
      // Only the first </think> ends it.
      {"a</think>b</think>c", "a", "b</think>c"},
      // The singular spelling is not a token: it does not end the reasoning.
      {"a<|tool_call_section_begin|>b", "a<|tool_call_section_begin|>b", ""},
      {"a</thin", "a</thin", ""},
      {"<thin", "<thin", ""},
      {"推理。</think>答案", "推理。", "答案"},
  };
  for (const ParserCase& c : cases) expect_extract(p, c);
}

TEST(ReasoningParser, ThinkingOffIsAllContent) {
  const KimiK2ReasoningParser p(false);
  expect_extract(p, {"<think>a</think>b", std::nullopt, "<think>a</think>b"});
  expect_extract(p, {"", std::nullopt, ""});
  KimiK2ReasoningParser s(false);
  EXPECT_TRUE(s.reasoning_ended());
  EXPECT_EQ(s.push("<think>a</th").content, "<think>a</th");
  EXPECT_EQ(s.push("ink>").content, "ink>");
  EXPECT_EQ(s.finish().content, "");
}

TEST(ReasoningParser, HoldsBackOnlyPossibleMarkerPrefixes) {
  KimiK2ReasoningParser p;
  auto d = p.push("<thi");
  EXPECT_EQ(d.reasoning, "");  // could still be <think>
  d = p.push("nk>abc</thi");
  EXPECT_EQ(d.reasoning, "abc");
  EXPECT_EQ(d.content, "");
  EXPECT_FALSE(p.reasoning_ended());
  d = p.push("nk>The");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "The");
  EXPECT_TRUE(p.reasoning_ended());
  d = p.push(" answer</think>");
  EXPECT_EQ(d.content, " answer</think>");
  EXPECT_EQ(p.finish().content, "");
}

TEST(ReasoningParser, ReleasesAFalseMarkerPrefix) {
  KimiK2ReasoningParser p;
  EXPECT_EQ(p.push("a<").reasoning, "a");
  EXPECT_EQ(p.push("b").reasoning, "<b");
  EXPECT_EQ(p.push("<|tool_calls").reasoning, "");
  EXPECT_EQ(p.push("_x").reasoning, "<|tool_calls_x");
  EXPECT_EQ(p.push("</th").reasoning, "");
  const auto d = p.finish();
  EXPECT_EQ(d.reasoning, "</th");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParser, SectionMarkerSplitAcrossDeltasGoesToContent) {
  KimiK2ReasoningParser p;
  auto d = p.push("thought<|tool_calls_sec");
  EXPECT_EQ(d.reasoning, "thought");
  d = p.push("tion_begin|><|tool_call_begin|>");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "<|tool_calls_section_begin|><|tool_call_begin|>");
}

std::vector<std::string> stream_texts() {
  const std::string& s = kSection;
  return {
      "",
      "<think>Let me think.</think>The answer is 4.",
      "Let me think.</think>The answer is 4.",
      "plain reasoning with < and </ and <think but no end",
      "<think></think>content only",
      "<thin</think>x",
      "<<think>>a</think>b",
      "a</think>b</think>c<think>d",
      "r" + s + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
      "r</th" + s + "x</think>y",
      "r<|tool_calls_section_begin|</think>c",
      "</think>",
      "<think>",
      "思考<thi</think>回答",
  };
}

TEST(ReasoningParser, StreamEqualsWholeTextForEverySplit) {
  for (const bool thinking : {true, false}) {
    const KimiK2ReasoningParser whole(thinking);
    for (const std::string& text : stream_texts()) {
      const auto expected = whole.extract(text);
      const std::string want_reasoning = expected.reasoning.value_or("");
      auto check = [&](const std::vector<size_t>& cuts) {
        const auto got = parser_test::stream_reasoning(thinking, cut(text, cuts));
        ASSERT_EQ(got.reasoning, want_reasoning) << text;
        ASSERT_EQ(got.content, expected.content) << text;
      };
      check({});
      check(parser_test::every_byte(text.size()));
      for (size_t i = 0; i <= text.size(); ++i)
        for (size_t j = i; j <= text.size(); ++j) check({i, j});
    }
  }
}

TEST(ReasoningParser, StreamEqualsWholeTextForRandomSplitsOfLongText) {
  Rng rng(7);
  std::string text = "<think>";
  for (int i = 0; i < 300; ++i) text += std::string("step ") + std::to_string(i) + " <thi </th <|tool_calls ";
  text += "</think>";
  for (int i = 0; i < 300; ++i) text += std::string("content ") + std::to_string(i) + " </think> ";
  const auto expected = KimiK2ReasoningParser().extract(text);
  for (int trial = 0; trial < 50; ++trial) {
    const auto got =
        parser_test::stream_reasoning(true, cut(text, parser_test::random_cuts(rng, text.size(), 1 + trial)));
    ASSERT_EQ(got.reasoning, *expected.reasoning);
    ASSERT_EQ(got.content, expected.content);
  }
}

}  // namespace
}  // namespace kimi
