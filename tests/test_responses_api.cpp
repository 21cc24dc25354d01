// OpenAI Responses (server/responses_api.h): the request as the chat body it runs as, the chat
// output reshaped as a response object and as the Responses stream events, and the whole path on
// the tiny model (object shape, event order and indexes).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_protocol.h"
#include "server/responses_api.h"
#include "server/serving.h"
#include "api_mutations.h"
#include "chat_bridge_fixture.h"
#include "test_util.h"

namespace kimi {
namespace {

ResponsesRequest translate(const std::string& body) { return responses_to_chat_request(parse_json_body(body)); }

// Event names, checking that each names its data's type and sequence numbers count from 0.
std::vector<std::string> names(const std::vector<std::pair<std::string, ojson>>& events) {
  std::vector<std::string> out;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].second["type"], events[i].first);
    EXPECT_EQ(events[i].second["sequence_number"], i) << events[i].first;
    out.push_back(events[i].first);
  }
  return out;
}

TEST(ResponsesRequest, TextInputInstructionsAndSettings) {
  const ResponsesRequest r = translate(R"({"model":"tiny","input":"Hello","instructions":"Be brief.",
    "max_output_tokens":32,"temperature":0.2,"top_p":0.5,"store":false,"metadata":{"k":"v"}})");
  EXPECT_EQ(r.chat["model"], "tiny");
  EXPECT_EQ(r.chat["messages"], ojson::parse(R"([{"role":"system","content":[{"type":"text","text":"Be brief."}]},
    {"role":"user","content":[{"type":"text","text":"Hello"}]}])"));
  EXPECT_EQ(r.chat["max_tokens"], 32);
  EXPECT_EQ(r.chat["temperature"], 0.2);
  EXPECT_EQ(r.chat["top_p"], 0.5);
  EXPECT_EQ(r.chat["chat_template_kwargs"]["thinking"], true);  // the template's default
  EXPECT_FALSE(r.chat.contains("stream"));
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["max_output_tokens"], 32);
  EXPECT_EQ(r.echo["metadata"], (ojson{{"k", "v"}}));
  EXPECT_EQ(r.echo["store"], false);
  EXPECT_NO_THROW(parse_chat_request(r.chat));
}

TEST(ResponsesRequest, ItemsBecomeAChatHistory) {
  const ResponsesRequest r = translate(R"({"stream":true,"input":[
    {"role":"user","content":"Weather in NYC?"},
    {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Need the tool."}]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
    {"type":"function_call","id":"fc_1","call_id":"call_abc","name":"get_weather","arguments":"{\"city\":\"NYC\"}"},
    {"type":"function_call","call_id":"call_def","name":"get_time","arguments":"{}"},
    {"type":"function_call_output","call_id":"call_abc","output":"72F"},
    {"type":"function_call_output","call_id":"call_def","output":[{"type":"input_text","text":"noon"}]},
    {"type":"message","role":"developer","content":[{"type":"input_text","text":"Answer in French."}]}],
    "tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object"},"strict":true},
             {"type":"function","name":"get_time"}],
    "tool_choice":{"type":"function","name":"get_weather"},"parallel_tool_calls":false,
    "reasoning":{"effort":"none"}})");
  const ojson& m = r.chat["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0]["role"], "user");
  EXPECT_EQ(m[1], ojson::parse(R"({"role":"assistant","content":"Checking.","reasoning_content":"Need the tool.",
    "tool_calls":[{"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"NYC\"}"}},
                  {"id":"call_def","type":"function","function":{"name":"get_time","arguments":"{}"}}]})"));
  EXPECT_EQ(m[2], (ojson{{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "72F"}}));
  EXPECT_EQ(m[3], (ojson{{"role", "tool"}, {"tool_call_id", "call_def"}, {"content", "noon"}}));
  EXPECT_EQ(m[4]["role"], "developer");
  EXPECT_EQ(r.chat["tools"][0], ojson::parse(R"({"type":"function","function":{"name":"get_weather","description":"Weather",
    "parameters":{"type":"object"},"strict":true}})"));
  EXPECT_EQ(r.chat["tool_choice"], ojson::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(r.chat["parallel_tool_calls"], false);
  EXPECT_EQ(r.chat["chat_template_kwargs"]["thinking"], false);  // effort none: thinking off
  EXPECT_EQ(r.chat["stream"], true);
  EXPECT_EQ(r.chat["stream_options"]["include_usage"], true);
  // The echoed settings are the request's own (flat tools, Responses tool_choice).
  EXPECT_EQ(r.echo["tools"][1], ojson::parse(R"({"type":"function","name":"get_time"})"));
  EXPECT_EQ(r.echo["tool_choice"], ojson::parse(R"({"type":"function","name":"get_weather"})"));
  EXPECT_EQ(r.echo["reasoning"]["effort"], "none");
  EXPECT_NO_THROW(parse_chat_request(r.chat));
}

TEST(ResponsesRequest, FunctionCallsWithoutAMessageOpenAnAssistantTurn) {
  const ResponsesRequest r = translate(R"({"input":[{"role":"user","content":"x"},
    {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"1"},
    {"type":"function_call","call_id":"c2","name":"f","arguments":"{}"}]})");
  const ojson& m = r.chat["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["tool_calls"].size(), 1u);
  EXPECT_EQ(m[3]["role"], "assistant");  // a call after a result is a new turn
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "c2");
}

TEST(ResponsesRequest, TextFormatAndEffortMapOntoTheChatFields) {
  const ResponsesRequest r = translate(R"({"input":"x","text":{"format":{"type":"json_schema","name":"person",
    "schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]},"strict":true}},
    "reasoning":{"effort":"high"}})");
  EXPECT_EQ(r.chat["response_format"], ojson::parse(R"({"type":"json_schema","json_schema":{"name":"person",
    "schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]},"strict":true}})"));
  EXPECT_EQ(r.echo["text"]["format"]["name"], "person");
  EXPECT_EQ(r.chat["chat_template_kwargs"]["thinking"], true);
  EXPECT_EQ(translate(R"({"input":"x","text":{"format":{"type":"json_object"}}})").chat["response_format"],
            ojson::parse(R"({"type":"json_object"})"));
  EXPECT_FALSE(translate(R"({"input":"x","text":{"format":{"type":"text"}}})").chat.contains("response_format"));
  EXPECT_EQ(translate(R"({"input":"x","reasoning":{"effort":"minimal"}})").chat["chat_template_kwargs"]["thinking"], false);
}

TEST(ResponsesRequest, BadRequestsAre400sNamingTheField) {
  const auto err = [](const std::string& body) { return test::api_error_of([&] { translate(body); }); };
  EXPECT_EQ(err(R"({"model":"tiny"})").param(), "input");
  EXPECT_EQ(err(R"({"input":[]})").param(), "input");
  EXPECT_EQ(err(R"({"input":"x","previous_response_id":"resp_1"})").param(), "previous_response_id");
  EXPECT_EQ(err(R"({"input":"x","tools":[{"type":"web_search"}]})").param(), "tools");
  EXPECT_EQ(err(R"({"input":"x","tool_choice":{"type":"allowed_tools"}})").param(), "tool_choice");
  EXPECT_EQ(err(R"({"input":"x","reasoning":{"effort":"extreme"}})").param(), "reasoning");
  EXPECT_EQ(err(R"({"input":"x","text":{"format":{"type":"json_schema","name":"n"}}})").param(), "text");
  EXPECT_EQ(err(R"({"input":[{"type":"item_reference","id":"x"}]})").param(), "input");
  const ApiError image = err(R"({"input":[{"role":"user","content":[{"type":"input_text","text":"see"},
    {"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}]})");
  EXPECT_EQ(image.status(), 400);
  EXPECT_NE(std::string(image.what()).find("input[0].content[1] is an 'input_image' part"), std::string::npos)
      << image.what();
}

// Any field of any type: the translation and the chat parser after it either accept the body or
// answer a 400; nothing else escapes (a JSON type error would be a 500).
TEST(ResponsesRequest, FieldsOfTheWrongTypeAreAcceptedOrA400) {
  const ojson body = ojson::parse(R"({"model":"tiny","instructions":"s","max_output_tokens":16,"temperature":0.5,
    "top_p":0.9,"stream":true,"store":false,"metadata":{"k":"v"},"parallel_tool_calls":true,"reasoning":{"effort":"low"},
    "text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}},
    "tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":false}],
    "tool_choice":{"type":"function","name":"f"},
    "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},
      {"type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"t"}]},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]},
      {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"r"}]})");
  test::expect_type_swaps_accepted_or_400(body, {[](const ojson& m) {
    ojson chat = responses_to_chat_request(m).chat;
    chat.erase("response_format");  // json_schema is the structured-output work's (400 until it lands)
    (void)parse_chat_request(chat);
  }});
}

ResponseContext context() {
  ResponseContext ctx;
  ctx.id = "resp_abc";
  ctx.model = "tiny";
  ctx.created_at = 1700000000;
  ctx.echo = translate(R"({"input":"x"})").echo;
  return ctx;
}

TEST(ResponsesResponse, ChatCompletionBecomesAResponseObject) {
  const ojson chat = ojson::parse(R"({"model":"tiny","choices":[{"index":0,
    "message":{"role":"assistant","content":"Let me look.","reasoning_content":"think","tool_calls":[
      {"id":"functions.get_weather:0","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"NYC\"}"}}]},
    "finish_reason":"tool_calls"}],
    "usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":4}}})");
  const ojson r = chat_to_response(chat, context());
  EXPECT_EQ(r["id"], "resp_abc");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["created_at"], 1700000000);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["incomplete_details"], nullptr);
  EXPECT_EQ(r["output"], ojson::parse(R"([
    {"id":"rs_abc_0","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"think"}],"status":"completed"},
    {"id":"msg_abc_1","type":"message","role":"assistant","status":"completed",
     "content":[{"type":"output_text","text":"Let me look.","annotations":[],"logprobs":[]}]},
    {"id":"fc_abc_2","type":"function_call","call_id":"functions.get_weather:0","name":"get_weather",
     "arguments":"{\"city\": \"NYC\"}","status":"completed"}])"));
  EXPECT_EQ(r["usage"], ojson::parse(R"({"input_tokens":11,"input_tokens_details":{"cached_tokens":4},
    "output_tokens":7,"total_tokens":18})"));
  EXPECT_EQ(r["tool_choice"], "auto");
  EXPECT_EQ(r["text"]["format"]["type"], "text");
}

TEST(ResponsesResponse, LengthIsIncompleteAndAnEmptyAnswerStillHasItsMessage) {
  const ojson chat = ojson::parse(R"({"model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":""},
    "finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1}})");
  const ojson r = chat_to_response(chat, context());
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], ojson::parse(R"({"reason":"max_output_tokens"})"));
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "");
}

ojson delta_chunk(ojson delta, ojson finish = nullptr) {
  ojson choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish}};
  return {{"id", "c"}, {"object", "chat.completion.chunk"}, {"model", "tiny"}, {"choices", {choice}}};
}

TEST(ResponsesStream, ChatChunksBecomeItemsInOrder) {
  auto t = make_responses_stream_translator(context());
  std::string raw = t->begin(5);
  raw += t->chunk(delta_chunk({{"role", "assistant"}, {"content", ""}}));
  raw += t->chunk(delta_chunk({{"reasoning_content", "th"}}));
  raw += t->chunk(delta_chunk({{"reasoning_content", "ink"}}));
  raw += t->chunk(delta_chunk({{"content", "Hi"}}));
  raw += t->chunk(delta_chunk(ojson::parse(
      R"({"tool_calls":[{"index":0,"id":"functions.f:3","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]})")));
  raw += t->chunk(delta_chunk(ojson::parse(R"({"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]})")));
  raw += t->chunk(delta_chunk(ojson::object(), "tool_calls"));
  raw += t->chunk(ojson::parse(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}})"));
  raw += t->end();
  const auto ev = test::parse_events(raw);
  EXPECT_EQ(names(ev), (std::vector<std::string>{
                           "response.created", "response.in_progress",
                           "response.output_item.added", "response.content_part.added",
                           "response.reasoning_text.delta", "response.reasoning_text.delta",
                           "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                           "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                           "response.output_text.done", "response.content_part.done", "response.output_item.done",
                           "response.output_item.added", "response.function_call_arguments.delta",
                           "response.function_call_arguments.delta", "response.function_call_arguments.done",
                           "response.output_item.done", "response.completed"}));
  EXPECT_EQ(ev[0].second["response"]["status"], "in_progress");
  EXPECT_EQ(ev[0].second["response"]["output"], ojson::array());
  EXPECT_EQ(ev[2].second["item"]["type"], "reasoning");
  EXPECT_EQ(ev[3].second["part"]["type"], "reasoning_text");
  EXPECT_EQ(ev[6].second["text"], "think");
  EXPECT_EQ(ev[9].second["output_index"], 1);
  EXPECT_EQ(ev[9].second["item"]["type"], "message");
  EXPECT_EQ(ev[11].second["item_id"], ev[9].second["item"]["id"]);
  EXPECT_EQ(ev[11].second["content_index"], 0);
  EXPECT_EQ(ev[15].second["item"]["call_id"], "functions.f:3");
  EXPECT_EQ(ev[15].second["output_index"], 2);
  EXPECT_EQ(ev[18].second["arguments"], "{\"a\":1}");
  EXPECT_EQ(ev[18].second["name"], "f");
  const ojson& done = ev.back().second["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["usage"]["output_tokens"], 9);
  ASSERT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Hi");
  EXPECT_EQ(done["output"][2]["arguments"], "{\"a\":1}");
  // Each output_item.done carries the item as the final response has it.
  EXPECT_EQ(ev[8].second["item"], done["output"][0]);
  EXPECT_EQ(ev[14].second["item"], done["output"][1]);
  EXPECT_EQ(ev[19].second["item"], done["output"][2]);
}

TEST(ResponsesStream, LengthEndsIncompleteAndNoOutputStillGivesAMessage) {
  auto t = make_responses_stream_translator(context());
  std::string raw = t->begin(1);
  raw += t->chunk(delta_chunk(ojson::object(), "length"));
  raw += t->end();
  const auto ev = test::parse_events(raw);
  const auto n = names(ev);
  ASSERT_EQ(n.size(), 8u);
  EXPECT_EQ(n[2], "response.output_item.added");
  EXPECT_EQ(n[4], "response.output_text.done");
  EXPECT_EQ(n.back(), "response.incomplete");
  EXPECT_EQ(ev.back().second["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

// ---------------------------------------------------------------------------------------------
using ResponsesServingTest = test::ChatBridgeServingTest<ResponsesApi>;

constexpr const char* kBody = R"({"model":"tiny","input":"Hello","instructions":"Be brief.","max_output_tokens":6,
  "temperature":0,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}])";

TEST_F(ResponsesServingTest, AnswersAsAResponseObject) {
  const ojson r = api_->start(parse_json_body(std::string(kBody) + R"(,"reasoning":{"effort":"none"}})"))->collect();
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["model"], "tiny");
  EXPECT_EQ(r["status"], "incomplete");  // 6 tokens of noise end nowhere else
  EXPECT_EQ(r["usage"]["output_tokens"], 6);
  EXPECT_GT(r["usage"]["input_tokens"].get<int>(), 5);
  ASSERT_GE(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");  // thinking off: the noise is content
  EXPECT_EQ(r["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["tools"][0]["name"], "get_weather");
}

TEST_F(ResponsesServingTest, StreamsEventsInOrder) {
  auto job = api_->start(parse_json_body(std::string(kBody) + R"(,"stream":true})"));
  ASSERT_TRUE(job->streaming());
  test::Sink sink;
  job->stream(sink);
  const auto ev = test::parse_events(sink.raw);
  const auto n = names(ev);
  ASSERT_GE(n.size(), 6u);
  EXPECT_EQ(n[0], "response.created");
  EXPECT_EQ(n[1], "response.in_progress");
  EXPECT_EQ(n.back(), "response.incomplete");
  EXPECT_EQ(ev[2].second["item"]["type"], "reasoning");  // thinking on: the noise is reasoning
  // Every item is added, then done, with output_index counting from 0.
  int64_t added = 0, done = 0;
  for (const auto& [name, d] : ev) {
    if (name == "response.output_item.added") {
      EXPECT_EQ(d["output_index"], added++);
    } else if (name == "response.output_item.done") {
      EXPECT_EQ(d["output_index"], done++);
    } else if (name.ends_with(".delta")) {
      EXPECT_EQ(d["output_index"], added - 1);
    }
  }
  EXPECT_EQ(added, done);
  EXPECT_EQ(ev.back().second["response"]["output"].size(), size_t(done));
  EXPECT_EQ(ev.back().second["response"]["usage"]["output_tokens"], 6);
}

}  // namespace
}  // namespace kimi
