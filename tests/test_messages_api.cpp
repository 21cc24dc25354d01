// Anthropic Messages (server/messages_api.h): the request as the chat body it runs as, the
// chat output reshaped as a message and as Anthropic's stream events, errors in Anthropic's
// shape, and the whole path on the tiny model (message shape, event order, count_tokens).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_protocol.h"
#include "server/messages_api.h"
#include "server/serving.h"
#include "api_mutations.h"
#include "chat_bridge_fixture.h"
#include "test_util.h"

namespace kimi {
namespace {

ojson translate(const std::string& body, bool count_only = false) {
  return messages_to_chat_body(parse_json_body(body), count_only);
}

std::vector<std::string> names(const std::vector<std::pair<std::string, ojson>>& events) {
  std::vector<std::string> out;
  for (const auto& [n, d] : events) {
    EXPECT_EQ(d["type"], n) << "the data's type names the event";
    out.push_back(n);
  }
  return out;
}

TEST(MessagesRequest, SystemMessagesAndSamplingBecomeAChatBody) {
  const ojson chat = translate(R"({"model":"tiny","max_tokens":64,"system":[{"type":"text","text":"Be brief."},
    {"type":"text","text":"Be kind."}],"messages":[{"role":"user","content":"hi"},
    {"role":"assistant","content":"hello"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
    "stop_sequences":["END"],"temperature":0.5,"top_p":0.9,"top_k":7,"metadata":{"user_id":"u"}})");
  EXPECT_EQ(chat["model"], "tiny");
  EXPECT_EQ(chat["max_tokens"], 64);
  EXPECT_EQ(chat["stop"], ojson::array({"END"}));
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["top_p"], 0.9);
  EXPECT_EQ(chat["top_k"], 7);
  EXPECT_EQ(chat["chat_template_kwargs"]["thinking"], false);  // Anthropic's default: no thinking
  EXPECT_FALSE(chat.contains("stream"));
  const ojson& m = chat["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], (ojson{{"role", "system"}, {"content", "Be brief.\nBe kind."}}));
  EXPECT_EQ(m[1], (ojson{{"role", "user"}, {"content", "hi"}}));
  EXPECT_EQ(m[2], (ojson{{"role", "assistant"}, {"content", "hello"}}));
  EXPECT_EQ(m[3]["content"], ojson::parse(R"([{"type":"text","text":"a"},{"type":"text","text":"b"}])"));
  // The body is one the chat endpoint accepts.
  EXPECT_NO_THROW(parse_chat_request(chat));
}

TEST(MessagesRequest, ToolUseThinkingAndToolResultsBecomeCallsReasoningAndToolMessages) {
  const ojson chat = translate(R"({"max_tokens":16,"thinking":{"type":"enabled","budget_tokens":1024},"stream":true,
    "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
    "tool_choice":{"type":"any","disable_parallel_tool_use":true},
    "messages":[{"role":"user","content":"Weather in NYC and Paris?"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"Need the tool.","signature":"sig"},
        {"type":"text","text":"Checking."},
        {"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"NYC"}},
        {"type":"tool_use","id":"toolu_02","name":"get_weather","input":{"city":"Paris"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"72F"},
        {"type":"tool_result","tool_use_id":"toolu_02","is_error":true,"content":[{"type":"text","text":"timeout"}]},
        {"type":"text","text":"Thanks"}]}]})");
  EXPECT_EQ(chat["chat_template_kwargs"]["thinking"], true);
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["tools"], ojson::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
    "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])"));
  const ojson& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], "Checking.");
  EXPECT_EQ(m[1]["reasoning_content"], "Need the tool.");
  ASSERT_EQ(m[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[1]["tool_calls"][0], ojson::parse(R"({"id":"toolu_01","type":"function",
    "function":{"name":"get_weather","arguments":"{\"city\":\"NYC\"}"}})"));
  EXPECT_EQ(m[2], (ojson{{"role", "tool"}, {"tool_call_id", "toolu_01"}, {"content", "72F"}}));
  EXPECT_EQ(m[3], (ojson{{"role", "tool"}, {"tool_call_id", "toolu_02"}, {"content", "Error: timeout"}}));
  EXPECT_EQ(m[4]["role"], "user");
  EXPECT_EQ(m[4]["content"][0]["text"], "Thanks");
  EXPECT_NO_THROW(parse_chat_request(chat));
}

TEST(MessagesRequest, AFinalAssistantMessageIsAPrefill) {
  const ojson chat = translate(R"({"max_tokens":4,"messages":[{"role":"user","content":"Count"},
    {"role":"assistant","content":[{"type":"text","text":"1, 2,"}]}]})");
  EXPECT_EQ(chat["continue_final_message"], true);
  EXPECT_EQ(chat["add_generation_prompt"], false);
  EXPECT_NO_THROW(parse_chat_request(chat));
  EXPECT_FALSE(translate(R"({"max_tokens":4,"messages":[{"role":"user","content":"Count"}]})").contains("continue_final_message"));
}

TEST(MessagesRequest, ToolChoiceMapsAsVllmDoes) {
  const std::string head = R"({"max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":)";
  EXPECT_EQ(translate(head + R"({"type":"auto"}})")["tool_choice"], "auto");
  EXPECT_EQ(translate(head + R"({"type":"none"}})")["tool_choice"], "none");
  EXPECT_EQ(translate(head + R"({"type":"any"}})")["tool_choice"], "required");
  EXPECT_EQ(translate(head + R"({"type":"tool","name":"f"}})")["tool_choice"],
            ojson::parse(R"({"type":"function","function":{"name":"f"}})"));
  EXPECT_FALSE(translate(head + R"({"type":"auto"}})").contains("parallel_tool_calls"));
  EXPECT_EQ(test::api_error_of([&] { translate(head + R"({"type":"sometimes"}})"); }).param(), "tool_choice");
}

TEST(MessagesRequest, BadRequestsAre400sNamingTheField) {
  const auto err = [](const std::string& body, bool count = false) {
    return test::api_error_of([&] { translate(body, count); });
  };
  EXPECT_EQ(err(R"({"messages":[{"role":"user","content":"x"}]})").param(), "max_tokens");
  EXPECT_EQ(err(R"({"max_tokens":0,"messages":[{"role":"user","content":"x"}]})").param(), "max_tokens");
  EXPECT_NO_THROW(translate(R"({"messages":[{"role":"user","content":"x"}]})", true));  // count_tokens
  EXPECT_EQ(err(R"({"max_tokens":1,"messages":[]})").param(), "messages");
  // A user message of no blocks leaves no chat message: the chat parser's 400.
  EXPECT_EQ(test::api_error_of([] { parse_chat_request(translate(R"({"max_tokens":1,"messages":[{"role":"user","content":[]}]})")); })
                .param(), "messages");
  EXPECT_EQ(err(R"({"max_tokens":1,"messages":[{"role":"system","content":"x"}]})").param(), "messages");
  const ApiError image = err(R"({"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"see"},
    {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]})");
  EXPECT_EQ(image.status(), 400);
  EXPECT_NE(std::string(image.what()).find("messages[0].content[1] is an 'image' block"), std::string::npos) << image.what();
  EXPECT_EQ(err(R"({"max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]})")
                .param(), "tools");
  EXPECT_EQ(err(R"({"max_tokens":1,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"maybe"}})").param(),
            "thinking");
  EXPECT_EQ(err(R"({"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]})")
                .param(), "messages");
}

// Any field of any type: the translation and the chat parser after it either accept the body or
// answer a 400; nothing else escapes (a JSON type error would be a 500).
TEST(MessagesRequest, FieldsOfTheWrongTypeAreAcceptedOrA400) {
  const ojson body = ojson::parse(R"({"model":"tiny","max_tokens":16,"system":[{"type":"text","text":"s"}],
    "stop_sequences":["x"],"temperature":0.5,"top_p":0.9,"top_k":3,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},
    "tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true},
    "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},
      {"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"a"},
        {"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"r"}],"is_error":false}]}]})");
  test::expect_type_swaps_accepted_or_400(
      body, {[](const ojson& m) { (void)parse_chat_request(messages_to_chat_body(m, false)); },
             [](const ojson& m) { (void)parse_chat_request(messages_to_chat_body(m, true)); }});
}

TEST(MessagesResponse, ChatCompletionBecomesAMessage) {
  const ojson chat = ojson::parse(R"({"id":"chatcmpl-1","object":"chat.completion","model":"tiny","choices":[{"index":0,
    "message":{"role":"assistant","content":"Let me look.","reasoning_content":"think","tool_calls":[
      {"id":"functions.get_weather:0","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"NYC\"}"}},
      {"id":"functions.f:1","type":"function","function":{"name":"f","arguments":"not json"}}]},
    "finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}})");
  const ojson m = chat_to_message(chat, "msg_1");
  EXPECT_EQ(m, ojson::parse(R"({"id":"msg_1","type":"message","role":"assistant","model":"tiny","content":[
    {"type":"thinking","thinking":"think","signature":""},{"type":"text","text":"Let me look."},
    {"type":"tool_use","id":"functions.get_weather:0","name":"get_weather","input":{"city":"NYC"}},
    {"type":"tool_use","id":"functions.f:1","name":"f","input":{}}],
    "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":7}})"));
}

TEST(MessagesResponse, StopReasonsMap) {
  auto reason = [](const char* finish, ojson stop) {
    ojson chat = ojson::parse(R"({"model":"m","choices":[{"message":{"role":"assistant","content":"x"}}],
      "usage":{"prompt_tokens":1,"completion_tokens":1}})");
    chat["choices"][0]["finish_reason"] = finish;
    chat["choices"][0]["stop_reason"] = stop;
    const ojson m = chat_to_message(chat, "msg_x");
    return m["stop_reason"].get<std::string>() + "/" + m["stop_sequence"].dump();
  };
  EXPECT_EQ(reason("stop", nullptr), "end_turn/null");
  EXPECT_EQ(reason("stop", 163586), "end_turn/null");  // a stop token id: the end of the turn
  EXPECT_EQ(reason("stop", "END"), "stop_sequence/\"END\"");
  EXPECT_EQ(reason("length", nullptr), "max_tokens/null");
  EXPECT_EQ(reason("tool_calls", nullptr), "tool_use/null");
}

ojson delta_chunk(ojson delta, ojson finish = nullptr, ojson stop = nullptr) {
  ojson choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish}};
  if (!finish.is_null()) choice["stop_reason"] = stop;
  return {{"id", "c"}, {"object", "chat.completion.chunk"}, {"model", "tiny"}, {"choices", {choice}}};
}

TEST(MessagesStream, ChatChunksBecomeBlocksInOrder) {
  auto t = make_messages_stream_translator("msg_1", "tiny");
  std::string raw = t->begin(42);
  raw += t->chunk(delta_chunk({{"role", "assistant"}, {"content", ""}}));
  raw += t->chunk(delta_chunk({{"reasoning_content", "th"}, {"reasoning", "th"}}));
  raw += t->chunk(delta_chunk({{"reasoning_content", "ink"}}));
  raw += t->chunk(delta_chunk({{"content", "Hi"}}));
  raw += t->chunk(delta_chunk(ojson::parse(
      R"({"tool_calls":[{"index":0,"id":"functions.f:0","type":"function","function":{"name":"f","arguments":""}}]})")));
  raw += t->chunk(delta_chunk(ojson::parse(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]})")));
  raw += t->chunk(delta_chunk(ojson::parse(R"({"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]})")));
  raw += t->chunk(delta_chunk(ojson::object(), "tool_calls"));
  raw += t->chunk(ojson::parse(R"({"choices":[],"usage":{"prompt_tokens":42,"completion_tokens":9,"total_tokens":51}})"));
  raw += t->end();
  const auto ev = test::parse_events(raw);
  EXPECT_EQ(names(ev), (std::vector<std::string>{
                           "message_start", "ping",
                           "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                           "content_block_start", "content_block_delta", "content_block_stop",
                           "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                           "message_delta", "message_stop"}));
  EXPECT_EQ(ev[0].second["message"]["usage"]["input_tokens"], 42);
  EXPECT_EQ(ev[0].second["message"]["id"], "msg_1");
  EXPECT_EQ(ev[0].second["message"]["content"], ojson::array());
  EXPECT_EQ(ev[2].second["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[3].second["delta"], (ojson{{"type", "thinking_delta"}, {"thinking", "th"}}));
  EXPECT_EQ(ev[6].second["index"], 1);
  EXPECT_EQ(ev[7].second["delta"], (ojson{{"type", "text_delta"}, {"text", "Hi"}}));
  EXPECT_EQ(ev[9].second["content_block"], ojson::parse(R"({"type":"tool_use","id":"functions.f:0","name":"f","input":{}})"));
  EXPECT_EQ(ev[10].second["delta"], ojson::parse(R"({"type":"input_json_delta","partial_json":"{\"a\":"})"));
  EXPECT_EQ(ev[12].second["index"], 2);
  EXPECT_EQ(ev[13].second["delta"], ojson::parse(R"({"stop_reason":"tool_use","stop_sequence":null})"));
  EXPECT_EQ(ev[13].second["usage"]["output_tokens"], 9);
}

TEST(MessagesStream, AStopSequenceAndAnErrorKeepTheirShapes) {
  auto t = make_messages_stream_translator("msg_2", "tiny");
  std::string raw = t->begin(3);
  raw += t->chunk(delta_chunk({{"content", "a"}}, "stop", "END"));
  raw += t->end();
  auto ev = test::parse_events(raw);
  EXPECT_EQ(ev[ev.size() - 2].second["delta"], ojson::parse(R"({"stop_reason":"stop_sequence","stop_sequence":"END"})"));
  ev = test::parse_events(t->error(error_body(503, "shutting down")));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].first, "error");
  EXPECT_EQ(ev[0].second, ojson::parse(R"({"type":"error","error":{"type":"overloaded_error","message":"shutting down"}})"));
  EXPECT_EQ(anthropic_error_body(400, "x")["error"]["type"], "invalid_request_error");
  EXPECT_EQ(anthropic_error_body(404, "x")["error"]["type"], "not_found_error");
}

// ---------------------------------------------------------------------------------------------
using MessagesServingTest = test::ChatBridgeServingTest<MessagesApi>;

constexpr const char* kBody =
    R"({"model":"tiny","max_tokens":6,"temperature":0,"system":"Be brief.","messages":[{"role":"user","content":"Hello"}],
        "tools":[{"name":"get_weather","input_schema":{"type":"object"}}])";

TEST_F(MessagesServingTest, AnswersAsAMessage) {
  const ojson m = api_->start(parse_json_body(std::string(kBody) + "}"))->collect();
  EXPECT_TRUE(m["id"].get<std::string>().starts_with("msg_"));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "tiny");
  EXPECT_EQ(m["stop_reason"], "max_tokens");  // 6 tokens of noise end nowhere else
  EXPECT_EQ(m["usage"]["output_tokens"], 6);
  const ojson counted = api_->count_tokens(parse_json_body(std::string(kBody) + "}"));
  EXPECT_EQ(m["usage"]["input_tokens"], counted["input_tokens"]);
  EXPECT_GT(counted["input_tokens"].get<int>(), 5);
  for (const auto& b : m["content"]) EXPECT_TRUE(b["type"] == "text" || b["type"] == "tool_use") << b;
}

TEST_F(MessagesServingTest, StreamsEventsInOrderWithThinking) {
  auto job = api_->start(parse_json_body(std::string(kBody) + R"(,"stream":true,"thinking":{"type":"enabled","budget_tokens":16}})"));
  ASSERT_TRUE(job->streaming());
  test::Sink sink;
  job->stream(sink);
  const auto ev = test::parse_events(sink.raw);
  const auto n = names(ev);
  ASSERT_GE(n.size(), 4u);
  EXPECT_EQ(n[0], "message_start");
  EXPECT_EQ(n[1], "ping");
  EXPECT_EQ(n[n.size() - 2], "message_delta");
  EXPECT_EQ(n.back(), "message_stop");
  // Blocks open, get deltas and close in turn, indexes counting from 0.
  int open = -1, next = 0;
  for (const auto& [name, d] : ev) {
    if (name == "content_block_start") {
      EXPECT_EQ(open, -1);
      EXPECT_EQ(d["index"], next);
      open = next++;
    } else if (name == "content_block_delta") {
      EXPECT_EQ(d["index"], open);
    } else if (name == "content_block_stop") {
      EXPECT_EQ(d["index"], open);
      open = -1;
    }
  }
  EXPECT_EQ(open, -1);
  EXPECT_GE(next, 1);
  EXPECT_EQ(ev[2].second["content_block"]["type"], "thinking");  // thinking on: the noise is reasoning
  EXPECT_EQ(ev[n.size() - 2].second["usage"]["output_tokens"], 6);
  EXPECT_EQ(ev[n.size() - 2].second["delta"]["stop_reason"], "max_tokens");
  // input_tokens counts the prompt with thinking on, as count_tokens does for the same body.
  const ojson counted = api_->count_tokens(parse_json_body(std::string(kBody) + R"(,"thinking":{"type":"enabled","budget_tokens":16}})"));
  EXPECT_EQ(ev[0].second["message"]["usage"]["input_tokens"], counted["input_tokens"]);
}

// A stop sequence reaches message_delta through the chat stream, whose finishing chunk carries
// vLLM's stop_reason (failed before: the chat stream had no stop_reason, so it read end_turn).
TEST_F(MessagesServingTest, AStopSequenceEndsTheStreamedMessage) {
  const int32_t a = tokenizer_->encode("a").at(0);
  ojson chat = messages_to_chat_body(parse_json_body(
      R"({"model":"tiny","max_tokens":5,"stream":true,"stop_sequences":["a"],"messages":[{"role":"user","content":"Hi"}]})"));
  chat["logit_bias"] = {{std::to_string(a), 100}};  // the first token is "a"
  BridgedJob job(serving_->start_chat(chat), [](const ojson& c) { return c; },
                 make_messages_stream_translator("msg_s", "tiny"));
  test::Sink sink;
  job.stream(sink);
  const auto ev = test::parse_events(sink.raw);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2].second["delta"], ojson::parse(R"({"stop_reason":"stop_sequence","stop_sequence":"a"})"));
  chat.erase("stream");
  chat.erase("stream_options");
  EXPECT_EQ(chat_to_message(serving_->start_chat(chat)->collect(), "msg_t")["stop_sequence"], "a");
}

TEST_F(MessagesServingTest, APrefillIsContinuedNotClosed) {
  const std::string body = R"({"model":"tiny","messages":[{"role":"user","content":"Count"},
    {"role":"assistant","content":"1, 2,"}]})";
  const std::string prompt = serving_->render_chat(parse_chat_request(messages_to_chat_body(parse_json_body(body), true)));
  EXPECT_TRUE(prompt.ends_with("1, 2,")) << prompt;
  // Greedy: sampled at temperature 1 the tiny model could end the message before 3 tokens.
  const ojson m = api_->start(parse_json_body(R"({"max_tokens":3,"temperature":0,)" + body.substr(1)))->collect();
  EXPECT_EQ(m["usage"]["output_tokens"], 3);
}

TEST_F(MessagesServingTest, ForeignToolUseIdsCountLikeCanonicalOnes) {
  // The history's toolu_ ids are rendered as functions.get_weather:0, so the prompt has exactly
  // the tokens of the same history written with the canonical id.
  auto body = [](const std::string& id) {
    return parse_json_body(R"({"messages":[{"role":"user","content":"w"},{"role":"assistant","content":[
      {"type":"tool_use","id":")" + id + R"(","name":"get_weather","input":{"city":"NYC"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":")" + id + R"(","content":"72"}]}]})");
  };
  EXPECT_EQ(api_->count_tokens(body("toolu_01A09q90qw90lq917835lq9")), api_->count_tokens(body("functions.get_weather:0")));
  // A canonical-looking id with the wrong index is renumbered too.
  EXPECT_EQ(api_->count_tokens(body("functions.get_weather:12345")), api_->count_tokens(body("functions.get_weather:0")));
}

}  // namespace
}  // namespace kimi
