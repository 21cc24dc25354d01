// Kimi's canonical tool-call ids (server/tool_call_ids.h): the IDX count across a conversation,
// the rewrite of foreign ids in a history with the tool results that answer them, and the
// prompt the chat path renders from such a history.
#include <gtest/gtest.h>

#include "engine/async_engine.h"
#include "model/kv_cache.h"
#include "server/json_body.h"
#include "server/openai_protocol.h"
#include "server/serving.h"
#include "server/tool_call_ids.h"
#include "test_util.h"

namespace kimi {
namespace {

ojson tool_call_message(const std::string& id, const std::string& name) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", "{}"}}}};
}
ojson assistant(ojson calls) { return {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", std::move(calls)}}; }
ojson tool(const std::string& id) { return {{"role", "tool"}, {"tool_call_id", id}, {"content", "ok"}}; }
ojson user() { return {{"role", "user"}, {"content", "hi"}}; }

TEST(ToolCallIds, CanonicalFormCountsFromZero) {
  EXPECT_EQ(canonical_tool_call_id("get_weather", 0), "functions.get_weather:0");
  EXPECT_EQ(canonical_tool_call_id("a.b", 12), "functions.a.b:12");
}

TEST(ToolCallIds, HistoryCountIsEveryAssistantCall) {
  const ojson msgs = {user(), assistant({tool_call_message("x", "f"), tool_call_message("y", "g")}), tool("x"), tool("y"),
                      {{"role", "assistant"}, {"content", "done"}}, user(), assistant({tool_call_message("z", "f")}), tool("z")};
  EXPECT_EQ(count_history_tool_calls(msgs), 3);
  EXPECT_EQ(count_history_tool_calls(ojson::array({user()})), 0);
}

TEST(ToolCallIds, ForeignIdsAndTheirResultsBecomeCanonical) {
  const ojson msgs = {user(), assistant({tool_call_message("call_abc123", "get_weather"), tool_call_message("toolu_01", "get_time")}),
                      tool("toolu_01"), tool("call_abc123"), user(), assistant({tool_call_message("call_abc123", "search")}),
                      tool("call_abc123"), tool("no_such_call")};
  const ojson out = canonicalize_tool_call_ids(msgs);
  EXPECT_EQ(out[1]["tool_calls"][0]["id"], "functions.get_weather:0");
  EXPECT_EQ(out[1]["tool_calls"][1]["id"], "functions.get_time:1");
  EXPECT_EQ(out[2]["tool_call_id"], "functions.get_time:1");
  EXPECT_EQ(out[3]["tool_call_id"], "functions.get_weather:0");
  // A repeated id in a later turn answers that turn's call, not the first one.
  EXPECT_EQ(out[5]["tool_calls"][0]["id"], "functions.search:2");
  EXPECT_EQ(out[6]["tool_call_id"], "functions.search:2");
  EXPECT_EQ(out[7]["tool_call_id"], "no_such_call");  // answers nothing: left alone
  // Everything else is untouched, and the input is not modified.
  EXPECT_EQ(out[1]["tool_calls"][0]["function"], msgs[1]["tool_calls"][0]["function"]);
  EXPECT_EQ(msgs[1]["tool_calls"][0]["id"], "call_abc123");
}

TEST(ToolCallIds, CanonicalLookingIdsWithTheWrongIndexAreRenumbered) {
  const ojson msgs = {user(), assistant({tool_call_message("functions.f:0", "f")}), tool("functions.f:0"), user(),
                      assistant({tool_call_message("functions.f:0", "f")}), tool("functions.f:0")};
  const ojson out = canonicalize_tool_call_ids(msgs);
  EXPECT_EQ(out[1]["tool_calls"][0]["id"], "functions.f:0");
  EXPECT_EQ(out[2]["tool_call_id"], "functions.f:0");
  EXPECT_EQ(out[4]["tool_calls"][0]["id"], "functions.f:1");
  EXPECT_EQ(out[5]["tool_call_id"], "functions.f:1");
}

TEST(ToolCallIds, ACanonicalHistoryIsLeftAsItIs) {
  const ojson msgs = {user(), assistant({tool_call_message("functions.f:0", "f"), tool_call_message("functions.g:1", "g")}),
                      tool("functions.f:0"), tool("functions.g:1")};
  EXPECT_EQ(canonicalize_tool_call_ids(msgs), msgs);
}

class ToolCallIdsServing : public test::TinyModelTest {};

// The chat path renders a client's `call_...` ids in the canonical form (failed before the
// rewrite: the prompt held `call_abc123` twice).
TEST_F(ToolCallIdsServing, TheChatTemplateSeesCanonicalIds) {
  EngineConfig c;
  c.block_size = 4;
  c.scheduler.max_model_len = 256;
  c.scheduler.max_num_batched_tokens = 256;
  c.scheduler.max_num_seqs = 4;
  c.kv_cache_bytes = size_t(64) * KvStorage::bytes_per_block(model_->config(), c.block_size);
  AsyncEngine engine(*model_, tokenizer_.get(), c);
  ServingConfig sc;
  sc.served_model_names = {"tiny"};
  sc.chat_template = tokenizer_->chat_template();
  OpenAiServing serving(engine, *tokenizer_, sc);
  const std::string body = R"({"messages":[{"role":"user","content":"Weather in NYC?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_abc123","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\": \"NYC\"}"}}]},
    {"role":"tool","tool_call_id":"call_abc123","content":"{\"temp\": 72}"}],
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]})";
  const std::string prompt = serving.render_chat(parse_chat_request(parse_json_body(body)));
  EXPECT_EQ(prompt.find("call_abc123"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"), std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("## Return of functions.get_weather:0\n"), std::string::npos) << prompt;
  engine.drain();
}

}  // namespace
}  // namespace kimi
