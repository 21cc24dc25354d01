// Disaggregated prefill with real `kimi serve` processes on 127.0.0.1: a producer, a consumer and
// a plain instance. A vLLM-style proxy's two calls (prefill with do_remote_decode, then decode with
// the producer's kv_transfer_params) must give the plain instance's greedy text for
// /v1/completions and /v1/chat/completions; after the producer is killed, the consumer
// recomputes (kv_load_failure_policy recompute) and still answers the same.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "serve_process.h"
#include "server/http/client.h"
#include "test_util.h"

namespace kimi {
namespace {

using json = nlohmann::json;

using test::get;
using test::post;
using test::ServeProcess;

// The concatenated text of an SSE completions stream.
std::string streamed_text(int port, json body) {
  body["stream"] = true;
  http::ClientRequest req;
  req.method = "POST";
  req.target = "/v1/completions";
  req.headers.push_back({"Content-Type", "application/json"});
  req.body = body.dump();
  std::string raw;
  http::send_request("127.0.0.1", port, req, {5, 60}, [](int) {}, [&](std::string_view piece) {
    raw.append(piece);
    return true;
  });
  std::string text;
  for (size_t at = raw.find("data: "); at != std::string::npos; at = raw.find("data: ", at + 6)) {
    const size_t end = raw.find("\n", at);
    const std::string line = raw.substr(at + 6, end - at - 6);
    if (line == "[DONE]") break;
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("choices") && !j["choices"].empty()) text += j["choices"][0].value("text", "");
  }
  return text;
}

TEST(KvTransferServe, ProducerAndConsumerProcessesMatchOneInstance) {
  test::TempDir dir;
  const auto model = test::make_tiny_model(dir).string();
  ServeProcess single(model, (dir.path() / "single.log").string());
  ServeProcess prod(model, (dir.path() / "p.log").string(),
                    {"--kv-transfer-config", R"({"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_ip":"127.0.0.1","kv_port":0,"engine_id":"p0"})"});
  ServeProcess cons(model, (dir.path() / "d.log").string(),
                    {"--kv-transfer-config", R"({"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_connector_extra_config":{"transfer_timeout":5}})"});
  ASSERT_GT(single.port(), 0) << single.log();
  ASSERT_GT(prod.port(), 0) << prod.log();
  ASSERT_GT(cons.port(), 0) << cons.log();
  EXPECT_NE(prod.log().find("kv transfer: NixlConnector, kv_producer, engine_id p0, listening on 127.0.0.1:"), std::string::npos)
      << prod.log();

  const json to_prefill = {{"do_remote_decode", true}, {"do_remote_prefill", false}, {"remote_engine_id", nullptr},
                           {"remote_block_ids", nullptr}, {"remote_host", nullptr}, {"remote_port", nullptr}};
  const std::string prompt = "The quick brown fox jumps over the lazy dog, and then the dog chases the fox around the farm";
  const json base = {{"prompt", prompt}, {"temperature", 0}, {"ignore_eos", true}};
  // The proxy's prefill half of a request: one token, the KV kept for a remote decode.
  const auto prefill = [&](const std::string& path, json req) {
    req["max_tokens"] = 1;
    req["kv_transfer_params"] = to_prefill;
    return post(prod.port(), path, req);
  };

  // /v1/completions
  json want_req = base;
  want_req["max_tokens"] = 12;
  const json want = post(single.port(), "/v1/completions", want_req);
  const json p_resp = prefill("/v1/completions", base);
  ASSERT_TRUE(p_resp.contains("kv_transfer_params")) << p_resp.dump();
  const json kv = p_resp["kv_transfer_params"];
  EXPECT_EQ(kv["do_remote_prefill"], true);
  EXPECT_EQ(kv["remote_engine_id"], "p0");
  EXPECT_FALSE(kv["remote_block_ids"].empty());
  json d_req = want_req;
  d_req["kv_transfer_params"] = kv;
  const json got = post(cons.port(), "/v1/completions", d_req);
  EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]) << got.dump();
  EXPECT_FALSE(got.contains("kv_transfer_params"));
  // At least one full block (16 tokens) before the last prompt token came over the wire.
  EXPECT_GT(got["usage"]["prompt_tokens"].get<int>(), 17);
  EXPECT_EQ(kv["remote_num_tokens"], got["usage"]["prompt_tokens"]);

  // The same through a streamed decode.
  const json p_again = prefill("/v1/completions", base);
  json d_stream = want_req;
  d_stream["kv_transfer_params"] = p_again["kv_transfer_params"];
  EXPECT_EQ(streamed_text(cons.port(), d_stream), want["choices"][0]["text"].get<std::string>());

  // /v1/chat/completions
  const json chat = {{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"temperature", 0}, {"ignore_eos", true}};
  json cw = chat;
  cw["max_tokens"] = 10;
  const json chat_want = post(single.port(), "/v1/chat/completions", cw);
  const json cp_resp = prefill("/v1/chat/completions", chat);
  ASSERT_TRUE(cp_resp.contains("kv_transfer_params")) << cp_resp.dump();
  json cd = cw;
  cd["kv_transfer_params"] = cp_resp["kv_transfer_params"];
  const json chat_got = post(cons.port(), "/v1/chat/completions", cd);
  EXPECT_EQ(chat_got["choices"][0]["message"]["content"], chat_want["choices"][0]["message"]["content"]) << chat_got.dump();

  // Both pulls succeeded: the consumer logged no failed load, and /metrics counts them.
  EXPECT_EQ(cons.log().find("kv transfer: request"), std::string::npos) << cons.log();
  const std::string metrics = get(cons.port(), "/metrics");
  EXPECT_NE(metrics.find("kimi:kv_transfer_loads_total{model_name="), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kimi:kv_transfer_bytes_total{model_name="), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kimi:kv_transfer_failures_total{model_name=\""), std::string::npos) << metrics;

  // A prefill whose producer dies before the decoder pulls: the decoder recomputes.
  // (Another prompt, so that nothing of it can come from a cache.)
  json other = want_req;
  other["prompt"] = "Once upon a time in a land far away there lived a king who had three daughters and a goat";
  const json other_want = post(single.port(), "/v1/completions", other);
  const json held = prefill("/v1/completions", other)["kv_transfer_params"];
  prod.stop(SIGKILL);
  json late = other;
  late["kv_transfer_params"] = held;
  const json recomputed = post(cons.port(), "/v1/completions", late);
  EXPECT_EQ(recomputed["choices"][0]["text"], other_want["choices"][0]["text"]) << recomputed.dump();
  EXPECT_NE(cons.log().find("kv transfer: request"), std::string::npos) << cons.log();

  // kv_transfer_params on a server without a connector: a 400 naming the field.
  int status = 0;
  json with_params = base;
  with_params["kv_transfer_params"] = to_prefill;
  const json refused = post(single.port(), "/v1/completions", with_params, &status);
  EXPECT_EQ(status, 400) << refused.dump();
}

}  // namespace
}  // namespace kimi
