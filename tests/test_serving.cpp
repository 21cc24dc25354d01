// OpenAiServing on the tiny model, without HTTP: length checks that cannot overflow, engine
// validation errors that name their param, prompt logprobs, echo with logprobs and text offsets,
// the chat template arguments (thinking truthiness, continue_final_message, tool_choice none)
// and special tokens with the reasoning parser.
#include <gtest/gtest.h>

#include <pthread.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "server/api_error.h"
#include "server/json_body.h"
#include "server/serving.h"
#include "test_util.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kimi {
namespace {


class Collector : public EventWriter {
 public:
  bool write(std::string_view data) override {
    raw.append(data);
    return true;
  }
  // The JSON events, without [DONE].
  std::vector<ojson> events() const {
    std::vector<ojson> out;
    size_t pos = 0;
    while ((pos = raw.find("data: ", pos)) != std::string::npos) {
      const size_t end = raw.find("\n\n", pos);
      const std::string payload = raw.substr(pos + 6, end - pos - 6);
      if (payload != "[DONE]") out.push_back(ojson::parse(payload));
      pos = end;
    }
    return out;
  }
  std::string raw;
};

class ServingTest : public test::TinyModelTest {
 protected:

  // A fresh engine and serving layer (engine state must not leak between tests).
  OpenAiServing& serve(ServingConfig sc = {}) {
    EngineConfig c;
    c.block_size = 4;
    c.scheduler.max_model_len = 128;
    c.scheduler.max_num_batched_tokens = 256;
    c.scheduler.max_num_seqs = 16;
    c.kv_cache_bytes = size_t(256) * KvStorage::bytes_per_block(model_->config(), c.block_size);
    c.enable_prefix_caching = true;
    engine_ = std::make_unique<AsyncEngine>(*model_, tokenizer_.get(), c);
    if (sc.served_model_names.empty()) sc.served_model_names = {"tiny"};
    sc.chat_template = tokenizer_->chat_template();
    serving_ = std::make_unique<OpenAiServing>(*engine_, *tokenizer_, sc);
    return *serving_;
  }
  void TearDown() override {
    serving_.reset();
    if (engine_) {
      engine_->drain();
      EXPECT_EQ(engine_->stats().running, 0);
    }
    engine_.reset();
  }

  ojson completion(const std::string& body) { return serving_->start_completion(parse_json_body(body))->collect(); }
  ojson chat(const std::string& body) { return serving_->start_chat(parse_json_body(body))->collect(); }
  std::vector<ojson> stream(const std::string& body, bool is_chat) {
    auto job = is_chat ? serving_->start_chat(parse_json_body(body)) : serving_->start_completion(parse_json_body(body));
    Collector c;
    job->stream(c);
    return c.events();
  }
  static int32_t special(const char* text) { return *tokenizer_->token_id(text); }

  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<OpenAiServing> serving_;
};

const char* kUser = R"("messages":[{"role":"user","content":"Tell me a story."}])";

TEST_F(ServingTest, DeepBodiesGetA400OnEveryEndpoint) {
  OpenAiServing& s = serve();
  // On a request thread's stack (8 MiB), as in the server.
  test::on_stack(size_t(8) << 20, [&] {
    const std::string deep = "{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + ",\"y\":1}";
    for (int endpoint = 0; endpoint < 3; ++endpoint) {
      const ApiError e = test::api_error_of([&] {
        const ojson body = parse_json_body(deep);
        if (endpoint == 0) (void)s.tokenize(body);
        if (endpoint == 1) (void)s.start_completion(body);
        if (endpoint == 2) (void)s.start_chat(body);
      });
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find("levels deep"), std::string::npos) << e.what();
    }
  });
  // The deepest body allowed goes through the whole chat path, the template's recursive tool
  // declaration included (each level a property holding an object: ts_object -> ts_field ->
  // ts_type), on half a request thread's stack (a Release build needs under 512 KiB): an answer
  // or a 400, never a crash.
  std::string schema = R"({"type":"string"})";
  for (int i = 0; i < (kMaxJsonDepth - 6) / 2; ++i)
    schema = R"({"type":"object","properties":{"a":)" + schema + R"(},"required":["a"]})";
  const std::string body = std::string("{") + kUser + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":)" +
                           schema + "}}]}";
  test::on_stack(size_t(4) << 20, [&] {
    try {
      EXPECT_GT(s.tokenize(parse_json_body(body))["count"].get<int64_t>(), 0);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << e.what();
    }
  });
}

TEST_F(ServingTest, HugeMaxTokensFailsTheContextCheckInsteadOfOverflowing) {
  serve();
  for (const char* mt : {"9223372036854775807", "9223372036854775800", "200"}) {
    const ApiError e = test::api_error_of([&] { (void)completion(std::string(R"({"prompt":"Hello","max_tokens":)") + mt + "}"); });
    EXPECT_EQ(e.status(), 400) << mt;
    EXPECT_EQ(e.param(), "max_tokens") << e.what();
    EXPECT_NE(std::string(e.what()).find("maximum context length is 128"), std::string::npos) << e.what();
  }
  const ApiError e = test::api_error_of([&] { (void)chat(std::string("{") + kUser + R"(,"max_completion_tokens":9223372036854775807})"); });
  EXPECT_EQ(e.param(), "max_tokens") << e.what();
  EXPECT_NE(std::string(e.what()).find("9223372036854775"), std::string::npos) << e.what();  // the real sum
}

TEST_F(ServingTest, EngineValidationErrorsNameTheirParam) {
  serve();
  const int32_t beyond = tokenizer_->vocab_size();
  const std::pair<std::string, const char*> cases[] = {
      {R"("temperature":-1)", "temperature"},
      {R"("top_p":0)", "top_p"},
      {R"("min_p":2)", "min_p"},
      {R"("presence_penalty":3)", "presence_penalty"},
      {R"("repetition_penalty":0)", "repetition_penalty"},
      {R"("temperature":1e308)", "temperature"},  // inf as a float
      {R"("max_tokens":2,"min_tokens":3)", "min_tokens"},
      {R"("stop_token_ids":[)" + std::to_string(beyond) + "]", "stop_token_ids"},
      {R"("logit_bias":{")" + std::to_string(beyond) + R"(":1})", "logit_bias"},
      {R"("logit_bias":{"5":1000})", "logit_bias"},
  };
  for (const auto& [field, param] : cases) {
    const ApiError e = test::api_error_of([&] { (void)completion(R"({"prompt":"Hello",)" + field + "}"); });
    EXPECT_EQ(e.status(), 400) << field;
    EXPECT_EQ(e.param(), param) << field << ": " << e.what();
  }
}

TEST_F(ServingTest, PromptLogprobsAreReturnedWholeEvenFromThePrefixCache) {
  serve();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 14; ++i) prompt.push_back(100 + 7 * i);
  const std::string ids = ojson(prompt).dump();
  // The first request fills the prefix cache; the second must still compute every prompt logprob.
  std::vector<ojson> runs;
  for (int run = 0; run < 2; ++run) {
    const ojson r = completion(R"({"prompt":)" + ids + R"(,"max_tokens":2,"temperature":0,"prompt_logprobs":2})");
    const ojson& pl = r["choices"][0]["prompt_logprobs"];
    ASSERT_TRUE(pl.is_array()) << r.dump();
    ASSERT_EQ(pl.size(), prompt.size()) << pl.dump();
    EXPECT_TRUE(pl[0].is_null());
    for (size_t i = 1; i < prompt.size(); ++i) {
      const std::string key = std::to_string(prompt[i]);
      ASSERT_TRUE(pl[i].contains(key)) << i << pl[i].dump();
      EXPECT_LE(pl[i][key]["logprob"].get<double>(), 0.0);
      EXPECT_LE(pl[i].size(), 3u);
      for (const auto& [tok, e] : pl[i].items()) {
        EXPECT_TRUE(e.contains("rank") && e.contains("decoded_token"));
        if (tok != key) {
          EXPECT_GE(e["rank"].get<int>(), 1);
        }
      }
    }
    runs.push_back(pl);
  }
  EXPECT_EQ(runs[0], runs[1]);
  // Without prompt_logprobs there is no such field.
  EXPECT_FALSE(completion(R"({"prompt":)" + ids + R"(,"max_tokens":1})")["choices"][0].contains("prompt_logprobs"));
  // Chat: once, beside the choices.
  const ojson c = chat(std::string("{") + kUser + R"(,"max_tokens":1,"prompt_logprobs":0})");
  ASSERT_TRUE(c.contains("prompt_logprobs")) << c.dump();
  EXPECT_EQ(int64_t(c["prompt_logprobs"].size()), c["usage"]["prompt_tokens"].get<int64_t>());
}

TEST_F(ServingTest, EchoWithLogprobsCoversThePromptWithTextOffsets) {
  serve();
  const std::string body =
      R"({"prompt":"Hello world, this is a test","echo":true,"logprobs":1,"max_tokens":3,"temperature":0,"ignore_eos":true)";
  const ojson r = completion(body + "}");
  const ojson& c = r["choices"][0];
  const ojson& lp = c["logprobs"];
  const size_t prompt_tokens = r["usage"]["prompt_tokens"].get<size_t>();
  const size_t total = prompt_tokens + r["usage"]["completion_tokens"].get<size_t>();
  ASSERT_EQ(lp["tokens"].size(), total) << lp.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), total);
  ASSERT_EQ(lp["top_logprobs"].size(), total);
  ASSERT_EQ(lp["text_offset"].size(), total);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < total; ++i) EXPECT_TRUE(lp["token_logprobs"][i].is_number()) << i;
  // The prompt is ASCII: each prompt token starts where the previous one's text ends, and the
  // tokens spell the echoed prompt.
  std::string spelled;
  for (size_t i = 0; i < prompt_tokens; ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), spelled.size()) << i;
    spelled += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(spelled, "Hello world, this is a test");
  EXPECT_EQ(lp["text_offset"][prompt_tokens].get<size_t>(), spelled.size());
  for (size_t i = 1; i < total; ++i) EXPECT_GE(lp["text_offset"][i], lp["text_offset"][i - 1]);
  EXPECT_EQ(c["text"].get<std::string>().substr(0, spelled.size()), spelled);

  // Streamed: the same tokens, logprobs and offsets, spread over the chunks.
  ojson tokens = ojson::array(), offsets = ojson::array(), lps = ojson::array();
  for (const ojson& e : stream(body + R"(,"stream":true})", false)) {
    const ojson& l = e["choices"][0]["logprobs"];
    for (const auto& x : l["tokens"]) tokens.push_back(x);
    for (const auto& x : l["text_offset"]) offsets.push_back(x);
    for (const auto& x : l["token_logprobs"]) lps.push_back(x);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
  ASSERT_EQ(lps.size(), total);
  EXPECT_TRUE(lps[0].is_null());

  // Without echo the generated tokens' offsets start at 0.
  const ojson g = completion(R"({"prompt":"Hello","logprobs":0,"max_tokens":2,"temperature":0,"ignore_eos":true})");
  EXPECT_EQ(g["choices"][0]["logprobs"]["text_offset"][0], 0);
}

TEST_F(ServingTest, ThinkingFollowsPythonTruthinessAsTheTemplateDoes) {
  ServingConfig sc;
  sc.reasoning_parser = true;
  serve(sc);
  auto reasoning_of = [&](const char* kwargs) {
    const ojson r = chat(std::string("{") + kUser + R"(,"max_tokens":4,"temperature":0,"ignore_eos":true,"chat_template_kwargs":)" +
                         kwargs + "}");
    return r["choices"][0]["message"]["reasoning_content"];
  };
  // Off: everything is content, no reasoning at all.
  for (const char* off : {R"({"thinking":0})", R"({"thinking":false})", R"({"enable_thinking":0})", R"({"thinking":""})",
                          R"({"thinking":0.0})"})
    EXPECT_TRUE(reasoning_of(off).is_null()) << off;
  // On: the template's rule, `thinking` decides when given, else `enable_thinking`.
  for (const char* on : {R"({"thinking":1})", R"({})", R"({"thinking":true,"enable_thinking":false})",
                         R"({"thinking":null,"enable_thinking":1})"})
    EXPECT_TRUE(reasoning_of(on).is_string()) << on;
}

TEST_F(ServingTest, ContinueFinalMessageRendersTheLastMessageOpen) {
  OpenAiServing& s = serve();
  const std::string msgs =
      R"({"messages":[{"role":"user","content":"Tell me a story."},{"role":"assistant","content":"Once upon a time "}])";
  const std::string open = s.render_chat(parse_chat_request(parse_json_body(msgs + R"(,"continue_final_message":true,"add_generation_prompt":false})")));
  EXPECT_TRUE(open.ends_with("Once upon a time ")) << open;
  const std::string closed = s.render_chat(parse_chat_request(parse_json_body(msgs + R"(,"add_generation_prompt":false})")));
  EXPECT_TRUE(closed.ends_with("<|im_end|>")) << closed;
  EXPECT_TRUE(closed.starts_with(open));
  // Text parts: the last one is continued.
  const std::string parts =
      R"({"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"text","text":"A"},{"type":"text","text":"Bee"}]}],"continue_final_message":true,"add_generation_prompt":false})";
  EXPECT_TRUE(s.render_chat(parse_chat_request(parse_json_body(parts))).ends_with("ABee"));
  // Nothing to continue is a 400; the request itself runs.
  EXPECT_EQ(test::api_error_of([&] {
              (void)s.render_chat(parse_chat_request(parse_json_body(
                  R"({"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"  "}],"continue_final_message":true,"add_generation_prompt":false})")));
            }).status(), 400);
  const ojson r = chat(msgs + R"(,"continue_final_message":true,"add_generation_prompt":false,"max_tokens":2})");
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), tokenizer_->encode(open).size());
}

TEST_F(ServingTest, ToolChoiceNoneKeepsTheToolsUnlessTheFlagSaysOtherwise) {
  const std::string body = std::string("{") + kUser +
                           R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_choice":"none"})";
  {
    OpenAiServing& s = serve();
    EXPECT_NE(s.render_chat(parse_chat_request(parse_json_body(body))).find("get_weather"), std::string::npos);
  }
  ServingConfig sc;
  sc.exclude_tools_when_tool_choice_none = true;
  OpenAiServing& s = serve(sc);
  EXPECT_EQ(s.render_chat(parse_chat_request(parse_json_body(body))).find("get_weather"), std::string::npos);
}

TEST_F(ServingTest, ReasoningParserKeepsSkippingSpecialTokens) {
  ServingConfig sc;
  sc.reasoning_parser = true;
  serve(sc);
  const std::string user_tok = std::to_string(special("<|im_user|>"));
  const std::string think_end = std::to_string(special("</think>"));
  auto run = [&](const std::string& extra, bool streamed) {
    const std::string body = std::string("{") + kUser + R"(,"max_tokens":3,"temperature":0,"ignore_eos":true,)" + extra;
    if (!streamed) {
      const ojson m = chat(body + "}")["choices"][0]["message"];
      return std::pair<std::string, std::string>(m["reasoning_content"].is_null() ? "" : m["reasoning_content"].get<std::string>(),
                                                 m["content"].is_null() ? "" : m["content"].get<std::string>());
    }
    std::pair<std::string, std::string> out;
    for (const ojson& e : stream(body + R"(,"stream":true})", true)) {
      const ojson& d = e["choices"][0]["delta"];
      if (d.contains("reasoning_content")) out.first += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) out.second += d["content"].get<std::string>();
    }
    return out;
  };
  for (bool streamed : {false, true}) {
    // A special token that is no marker: hidden by default, shown when asked.
    auto [r1, c1] = run(R"("logit_bias":{")" + user_tok + R"(":100})", streamed);
    EXPECT_EQ(r1 + c1, "") << streamed;
    auto [r2, c2] = run(R"("logit_bias":{")" + user_tok + R"(":100},"skip_special_tokens":false)", streamed);
    EXPECT_EQ(r2, "<|im_user|><|im_user|><|im_user|>") << streamed;
    // The markers still split reasoning from content, and are not shown either.
    auto [r3, c3] = run(R"("logit_bias":{")" + think_end + R"(":100})", streamed);
    EXPECT_EQ(r3, "") << streamed;
    EXPECT_EQ(c3, "") << streamed;
    auto [r4, c4] = run(R"("logit_bias":{")" + think_end + R"(":100},"skip_special_tokens":false)", streamed);
    EXPECT_EQ(c4, "</think></think>") << streamed;
  }
}

TEST_F(ServingTest, DecoderSkipsEverySpecialButTheKeptOnes) {
  const std::vector<int32_t> ids = tokenizer_->encode("a<think>b<|im_user|>c</think>d");
  IncrementalDecoder keep(*tokenizer_, true, {special("<think>"), special("</think>")});
  std::string text;
  for (int32_t id : ids) text += keep.push(id);
  EXPECT_EQ(text + keep.flush(), "a<think>bc</think>d");
  IncrementalDecoder skip(*tokenizer_, true);
  text.clear();
  for (int32_t id : ids) text += skip.push(id);
  EXPECT_EQ(text + skip.flush(), "abcd");
}

}  // namespace
}  // namespace kimi
