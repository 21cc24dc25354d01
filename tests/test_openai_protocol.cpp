// The request body reader and the OpenAI field readers on hostile input: nesting depth, integers
// that do not fit, media content parts, and field combinations vLLM refuses. No model needed.
#include <gtest/gtest.h>
#include <pthread.h>

#include <functional>
#include <string>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_protocol.h"
#include "test_util.h"

namespace kimi {
namespace {

std::string nested(int depth, const std::string& open = "[", const std::string& close = "]") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}


ApiRequest completion(const std::string& body) { return parse_completion_request(parse_json_body(body)); }
ApiRequest chat(const std::string& body) { return parse_chat_request(parse_json_body(body)); }

TEST(JsonBody, TheIssuesDeepBodyIsA400NotACrash) {
  // Issue 19's body: 100,000 levels, then another key. Adding "y" to the object copied the deep
  // value recursively (inside the JSON parser) and overflowed a request thread's 8 MiB stack.
  test::on_stack(size_t(8) << 20, [] {
    const std::string body = "{\"x\":" + nested(100000) + ",\"y\":1}";
    const ApiError e = test::api_error_of([&] { (void)parse_completion_request(parse_json_body(body)); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("128 levels"), std::string::npos) << e.what();
    // Ten times deeper: the old parse overflowed a Release build here even where the frames of
    // the copy were small enough to survive the issue's body.
    EXPECT_EQ(test::api_error_of([&] { (void)parse_json_body("{\"x\":" + nested(1000000) + ",\"y\":1}"); }).status(), 400);
    // Deep objects too.
    std::string objects;
    for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
    objects += "1" + std::string(100000, '}');
    EXPECT_EQ(test::api_error_of([&] { (void)parse_json_body(objects + ",\"b\":1}"); }).status(), 400);
  });
}

TEST(JsonBody, DepthLimitIsExact) {
  // The body object is level 1, so the value may nest kMaxJsonDepth - 1 more levels.
  EXPECT_NO_THROW(parse_json_body("{\"x\":" + nested(kMaxJsonDepth - 1) + "}"));
  EXPECT_EQ(test::api_error_of([&] { (void)parse_json_body("{\"x\":" + nested(kMaxJsonDepth) + "}"); }).status(), 400);
  EXPECT_NO_THROW(parse_json_body(nested(kMaxJsonDepth)));
  EXPECT_EQ(test::api_error_of([&] { (void)parse_json_body(nested(kMaxJsonDepth + 1)); }).status(), 400);
  // Deep strings are not nesting.
  EXPECT_NO_THROW(parse_json_body("{\"x\":\"" + nested(100000) + "\"}"));
}

TEST(JsonBody, InvalidJsonIsA400) {
  for (const char* bad : {"", "{", "{\"a\":}", "[1,]", "\"\xff\"", "{} x"}) {
    const ApiError e = test::api_error_of([&] { (void)parse_json_body(bad); });
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(IntegerFields, SixtyFourBitValuesAreRangeCheckedNotTruncated) {
  struct Case {
    std::string body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt":[4294967301]})", "prompt"},  // was read as token 5
      {R"({"prompt":[[1],[4294967297]]})", "prompt"},
      {R"({"prompt":[-1]})", "prompt"},
      {R"({"prompt":"a","n":4294967297})", "n"},  // was read as 1
      {R"({"prompt":"a","n":0})", "n"},
      {R"({"prompt":"a","max_tokens":18446744073709551615})", "max_tokens"},  // uint64, wrapped to -1
      {R"({"prompt":"a","max_tokens":0})", "max_tokens"},
      {R"({"prompt":"a","max_completion_tokens":-5})", "max_completion_tokens"},
      {R"({"prompt":"a","min_tokens":-1})", "min_tokens"},
      {R"({"prompt":"a","top_k":4294967296})", "top_k"},
      {R"({"prompt":"a","priority":2147483648})", "priority"},
      {R"({"prompt":"a","seed":18446744073709551615})", "seed"},
      {R"({"prompt":"a","stop_token_ids":[4294967296]})", "stop_token_ids"},
      {R"({"prompt":"a","logprobs":4294967297})", "logprobs"},
      {R"({"prompt":"a","logprobs":21})", "logprobs"},
      {R"({"prompt":"a","prompt_logprobs":-1})", "prompt_logprobs"},
      {R"({"prompt":"a","best_of":4294967297})", "best_of"},
      {R"({"prompt":"a","logit_bias":{"4294967297":1}})", "logit_bias"},
      {R"({"prompt":"a","logit_bias":{" 12":1}})", "logit_bias"},
      {R"({"prompt":"a","logit_bias":{"+12":1}})", "logit_bias"},
  };
  for (const Case& c : cases) {
    const ApiError e = test::api_error_of([&] { (void)completion(c.body); });
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.what();
  }
  const ApiError top = test::api_error_of([] { (void)chat(R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":4294967297})"); });
  EXPECT_EQ(top.param(), "top_logprobs");
}

TEST(FloatFields, ValuesBeyondFloatAreRefusedNotNarrowed) {
  // Narrowing such a double to float is undefined behaviour (UBSan's float-cast-overflow).
  for (const auto& [body, param] : {std::pair<const char*, const char*>{R"({"prompt":"a","temperature":1e308})", "temperature"},
                                    {R"({"prompt":"a","top_p":-1e39})", "top_p"},
                                    {R"({"prompt":"a","logit_bias":{"5":1e300}})", "logit_bias"}}) {
    const ApiError e = test::api_error_of([&] { (void)completion(body); });
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), param) << body;
  }
  EXPECT_FLOAT_EQ(completion(R"({"prompt":"a","temperature":3e38})").params.temperature, 3e38f);
}

TEST(IntegerFields, InRangeValuesArriveExactly) {
  const ApiRequest r = completion(
      R"({"prompt":[[0,2147483647]],"n":16,"max_tokens":9223372036854775807,"min_tokens":3,"top_k":-1,
          "seed":-1,"priority":-2147483648,"stop_token_ids":[7],"logit_bias":{"2147483647":-1},"logprobs":20})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{0, 2147483647}));
  EXPECT_EQ(r.params.n, 16);
  EXPECT_EQ(r.params.max_tokens, INT64_MAX);  // the serving layer's length check refuses it
  EXPECT_EQ(r.params.min_tokens, 3);
  EXPECT_EQ(r.params.top_k, -1);
  EXPECT_EQ(*r.params.seed, UINT64_MAX);
  EXPECT_EQ(r.priority, INT32_MIN);
  ASSERT_EQ(r.params.logit_bias.size(), 1u);
  EXPECT_EQ(r.params.logit_bias[0].first, INT32_MAX);
  EXPECT_EQ(*r.params.logprobs, 20);
}

TEST(MediaParts, EveryMediaPartIsRefusedWithAClearError) {
  for (const char* part :
       {R"({"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}})",
        R"({"type":"image_url","image_url":{"url":"file:///etc/passwd"}})",
        R"({"type":"image_url","image_url":{"url":"http://127.0.0.1:1/x.png"}})",
        R"({"type":"input_audio","input_audio":{"data":"!!notbase64","format":"wav"}})",
        R"({"type":"video_url","video_url":{"url":"http://x/v.mp4"}})",
        R"({"type":"file","file":{"file_data":"AAAA"}})", R"({"type":"audio_url","audio_url":{"url":"x"}})"}) {
    const std::string body = std::string(R"({"messages":[{"role":"user","content":[{"type":"text","text":"look"},)") +
                             part + "]}]}";
    const ApiError e = test::api_error_of([&] { (void)chat(body); });
    EXPECT_EQ(e.status(), 400) << part;
    EXPECT_EQ(e.param(), "messages");
    EXPECT_NE(std::string(e.what()).find("text only"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("messages[0].content[1]"), std::string::npos) << e.what();
  }
  // Media in any role is refused; text parts still pass.
  EXPECT_EQ(test::api_error_of([] {
              (void)chat(R"({"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"x"}}]},{"role":"user","content":"hi"}]})");
            }).status(), 400);
  EXPECT_NO_THROW(chat(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})"));
}

TEST(ChatFields, ContinueFinalMessageAndGenerationPromptExcludeEachOther) {
  const ApiError e = test::api_error_of([] {
    (void)chat(R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Once"}],"continue_final_message":true})");
  });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "continue_final_message");
  const ApiRequest r = chat(
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Once"}],"continue_final_message":true,"add_generation_prompt":false})");
  EXPECT_TRUE(r.continue_final_message);
  EXPECT_FALSE(r.add_generation_prompt);
}

TEST(ChatFields, PromptLogprobsAreReadButNotWithStreaming) {
  EXPECT_EQ(*chat(R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":2})").params.prompt_logprobs, 2);
  EXPECT_EQ(*completion(R"({"prompt":"hi","prompt_logprobs":0})").params.prompt_logprobs, 0);
  const ApiError e = test::api_error_of([] { (void)completion(R"({"prompt":"hi","prompt_logprobs":1,"stream":true})"); });
  EXPECT_EQ(e.param(), "prompt_logprobs");
}

}  // namespace
}  // namespace kimi
