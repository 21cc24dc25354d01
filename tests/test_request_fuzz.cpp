// Random and truncated request bodies against the OpenAI request parsers: every input either
// parses or fails with an ApiError carrying a 4xx status; nothing else escapes (run under ASan).
#include <gtest/gtest.h>

#include "common/rng.h"
#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_protocol.h"

namespace kimi {
namespace {

const char* kSeeds[] = {
    R"({"model":"tiny","prompt":"Hello","max_tokens":5,"temperature":0.5,"stop":["\n"],"logprobs":2})",
    R"({"model":"tiny","prompt":[[1,2,3],[4,5]],"n":2,"echo":true,"logit_bias":{"12":-100}})",
    R"({"model":"tiny","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":" there"}]}],"stream":true,"stream_options":{"include_usage":true}})",
    R"({"messages":[{"role":"user","content":"w"},{"role":"assistant","content":null,"tool_calls":[{"id":"functions.f:0","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"functions.f:0","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"chat_template_kwargs":{"thinking":false},"response_format":{"type":"json_object"},"logprobs":true,"top_logprobs":3})",
};

// Parses what it can of `text` and runs both request parsers; returns false if anything other
// than a client error came out.
bool survives(const std::string& text) {
  ojson body;
  try {
    body = parse_json_body(text);
  } catch (const ApiError& e) {
    return e.status() == 400;  // the server answers 400 before the parsers see it
  } catch (...) {
    return false;
  }
  for (int chat = 0; chat < 2; ++chat) {
    try {
      if (chat) (void)parse_chat_request(body);
      else (void)parse_completion_request(body);
    } catch (const ApiError& e) {
      if (e.status() < 400 || e.status() >= 500) return false;
    } catch (...) {
      return false;
    }
  }
  return true;
}

TEST(RequestFuzz, SeedsParse) {
  EXPECT_NO_THROW(parse_completion_request(ojson::parse(kSeeds[0])));
  EXPECT_NO_THROW(parse_completion_request(ojson::parse(kSeeds[1])));
  EXPECT_NO_THROW(parse_chat_request(ojson::parse(kSeeds[2])));
  EXPECT_NO_THROW(parse_chat_request(ojson::parse(kSeeds[3])));
}

TEST(RequestFuzz, EveryTruncation) {
  for (const char* seed : kSeeds) {
    const std::string s = seed;
    for (size_t n = 0; n <= s.size(); ++n) ASSERT_TRUE(survives(s.substr(0, n))) << s.substr(0, n);
  }
}

TEST(RequestFuzz, RandomMutationsAndTypeSwaps) {
  Rng rng(17);
  const char* values[] = {"null", "true", "-1", "1e308", "\"x\"", "[]", "{}", "[1,\"a\"]", "99999999999999999999", "0.5"};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = kSeeds[rng.next_u64() % 4];
    const int edits = 1 + int(rng.next_u64() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t pos = rng.next_u64() % s.size();
      switch (rng.next_u64() % 3) {
        case 0: s[pos] = char(rng.next_u64() % 256); break;  // byte flip
        case 1: s.erase(pos, 1 + rng.next_u64() % 8); break;
        default: {
          // Replace the value after a ':' by one of another type.
          const size_t colon = s.find(':', pos);
          if (colon == std::string::npos) break;
          const size_t end = s.find_first_of(",}", colon + 1);
          if (end == std::string::npos) break;
          s.replace(colon + 1, end - colon - 1, values[rng.next_u64() % 10]);
        }
      }
    }
    ASSERT_TRUE(survives(s)) << s;
  }
}

}  // namespace
}  // namespace kimi
