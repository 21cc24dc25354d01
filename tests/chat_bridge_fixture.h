#pragma once
// What the tests of the APIs mapped onto chat (test_messages_api, test_responses_api) share: a
// suite that runs one such API over a live engine on the tiny model, a writer that keeps what a
// streaming job writes, and the split of a stream of named SSE events into {event, data}.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/async_engine.h"
#include "model/kv_cache.h"
#include "server/json_body.h"
#include "server/serving.h"
#include "test_util.h"

namespace kimi::test {

// Keeps everything a streaming job writes.
class Sink : public EventWriter {
 public:
  bool write(std::string_view data) override {
    raw.append(data);
    return true;
  }
  std::string raw;
};

// The SSE events of a text ("event: NAME\ndata: JSON\n\n" each): {event name, data}.
inline std::vector<std::pair<std::string, ojson>> parse_events(const std::string& raw) {
  std::vector<std::pair<std::string, ojson>> out;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t end = raw.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    const std::string ev = raw.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_TRUE(ev.starts_with("event: ")) << ev;
    const size_t nl = ev.find('\n');
    const std::string name = ev.substr(7, nl - 7);
    EXPECT_TRUE(ev.substr(nl + 1).starts_with("data: ")) << ev;
    out.emplace_back(name, ojson::parse(ev.substr(nl + 7)));
  }
  return out;
}

// A suite whose tests run Api (MessagesApi, ResponsesApi: built on an OpenAiServing) over an
// engine on the suite's tiny model, with the reasoning and tool parsers on; made anew per test.
template <class Api>
class ChatBridgeServingTest : public TinyModelTest {
 protected:
  void SetUp() override {
    EngineConfig c;
    c.block_size = 4;
    c.scheduler.max_model_len = 256;
    c.scheduler.max_num_batched_tokens = 256;
    c.scheduler.max_num_seqs = 4;
    c.kv_cache_bytes = size_t(128) * KvStorage::bytes_per_block(model_->config(), c.block_size);
    engine_ = std::make_unique<AsyncEngine>(*model_, tokenizer_.get(), c);
    ServingConfig sc;
    sc.served_model_names = {"tiny"};
    sc.chat_template = tokenizer_->chat_template();
    sc.reasoning_parser = sc.tool_parser = true;
    serving_ = std::make_unique<OpenAiServing>(*engine_, *tokenizer_, sc);
    api_ = std::make_unique<Api>(*serving_);
  }
  void TearDown() override {
    api_.reset();
    serving_.reset();
    engine_->drain();
    engine_.reset();
  }
  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<OpenAiServing> serving_;
  std::unique_ptr<Api> api_;
};

}  // namespace kimi::test
