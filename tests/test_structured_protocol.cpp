// The structured-output request fields: response_format, structured_outputs and guided_*, read
// into SamplingParams::structured for chat and completions; malformed or conflicting ones are 400s.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_protocol.h"
#include "test_util.h"

namespace kimi {
namespace {

using structured::SpecKind;

ApiRequest completion(const std::string& extra) {
  return parse_completion_request(parse_json_body(R"({"prompt":"hi")" + extra + "}"));
}
ApiRequest chat(const std::string& extra) {
  return parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}"));
}

TEST(StructuredProtocol, ResponseFormat) {
  EXPECT_FALSE(chat("").params.structured.active());
  EXPECT_FALSE(chat(R"(,"response_format":{"type":"text"})").params.structured.active());
  const auto jo = chat(R"(,"response_format":{"type":"json_object"})");
  EXPECT_EQ(jo.params.structured.kind, SpecKind::JsonObject);
  EXPECT_TRUE(jo.json_object);
  const auto js = chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,
                         "schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})");
  EXPECT_EQ(js.params.structured.kind, SpecKind::JsonSchema);
  EXPECT_EQ(nlohmann::json::parse(js.params.structured.text)["properties"]["a"]["type"], "integer");
  EXPECT_EQ(js.params.structured.param, "response_format");
  // Completions take it too.
  EXPECT_EQ(completion(R"(,"response_format":{"type":"json_object"})").params.structured.kind, SpecKind::JsonObject);
}

TEST(StructuredProtocol, VllmFields) {
  const auto a = completion(R"(,"structured_outputs":{"regex":"[a-z]+"})");
  EXPECT_EQ(a.params.structured.kind, SpecKind::Regex);
  EXPECT_EQ(a.params.structured.text, "[a-z]+");
  EXPECT_EQ(a.params.structured.param, "structured_outputs");
  const auto b = chat(R"(,"structured_outputs":{"choice":["x","y"]})");
  EXPECT_EQ(b.params.structured.kind, SpecKind::Choice);
  EXPECT_EQ(nlohmann::json::parse(b.params.structured.text), nlohmann::json({"x", "y"}));
  EXPECT_EQ(chat(R"(,"structured_outputs":{"json":{"type":"integer"}})").params.structured.kind, SpecKind::JsonSchema);
  EXPECT_EQ(chat(R"(,"structured_outputs":{"json":"{\"type\":\"integer\"}"})").params.structured.text, R"({"type":"integer"})");
  EXPECT_EQ(chat(R"(,"structured_outputs":{"grammar":"root ::= \"a\""})").params.structured.kind, SpecKind::Grammar);
  EXPECT_EQ(completion(R"(,"guided_json":{"type":"string"})").params.structured.param, "guided_json");
  EXPECT_EQ(completion(R"(,"guided_regex":"a|b")").params.structured.kind, SpecKind::Regex);
  EXPECT_EQ(completion(R"(,"guided_choice":["a"])").params.structured.kind, SpecKind::Choice);
  EXPECT_EQ(completion(R"(,"guided_grammar":"root ::= \"a\"")").params.structured.kind, SpecKind::Grammar);
}

TEST(StructuredProtocol, BadFieldsAre400s) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(,"response_format":{"type":"xml"})", "response_format"},
      {R"(,"response_format":{"type":"json_schema"})", "response_format"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}})", "response_format"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"schema":5}})", "response_format"},
      {R"(,"structured_outputs":{"regex":"a","choice":["a"]})", "structured_outputs"},
      {R"(,"structured_outputs":{"choice":[]})", "structured_outputs"},
      {R"(,"structured_outputs":{"choice":[1]})", "structured_outputs"},
      {R"(,"structured_outputs":{"structural_tag":{}})", "structured_outputs"},
      {R"(,"response_format":{"type":"json_object"},"guided_regex":"a")", "guided_regex"},
      {R"(,"guided_regex":5)", "guided_regex"},
  };
  for (const auto& [extra, param] : cases) {
    const ApiError e = test::api_error_of([&] { (void)chat(extra); });
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(e.param(), param) << extra;
  }
}

}  // namespace
}  // namespace kimi
