// libFuzzer target: a request body through everything the server does with it before the model
// runs: parse_json_body (depth-bounded JSON), both OpenAI request readers, and the sampling
// parameters' validation. Client errors (ApiError 4xx, ParamError / kimi::Error) are expected;
// anything else (another exception, a 5xx, a crash, a sanitizer report) is a finding.
// One-off build and run (clang 14):
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc fuzz/request_fuzz.cpp \
//     src/server/json_body.cpp src/server/openai_protocol.cpp src/engine/sampling_params.cpp -o request_fuzz
//   ./request_fuzz -max_total_time=60 -max_len=4096 CORPUS_COPY fuzz/corpus/request
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_protocol.h"

namespace {

// Kimi-K2.5's vocabulary size, for the token id checks.
constexpr int64_t kVocab = 163840;

void expect_client_error(const kimi::ApiError& e) {
  if (e.status() < 400 || e.status() >= 500) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kimi::ojson body;
  try {
    body = kimi::parse_json_body(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const kimi::ApiError& e) {
    expect_client_error(e);
    return 0;
  }
  for (int chat = 0; chat < 2; ++chat) {
    try {
      const kimi::ApiRequest r = chat ? kimi::parse_chat_request(body) : kimi::parse_completion_request(body);
      r.params.validate(kVocab);
      (void)r.messages.dump();  // what the chat template receives, walked once more
    } catch (const kimi::ApiError& e) {
      expect_client_error(e);
    } catch (const kimi::Error&) {  // ParamError from validate()
    }
  }
  return 0;
}
