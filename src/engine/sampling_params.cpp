#include "engine/sampling_params.h"

#include <cmath>
#include <sstream>


namespace kimi {

namespace {

template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

[[noreturn]] void fail(const std::string& field, const std::string& rule, const std::string& got) {
  throw ParamError(field, field + " must be " + rule + ", got " + got);
}

// Comparisons are written so that NaN fails them.
void check_range(const char* field, float v, float lo, float hi) {
  if (!(v >= lo && v <= hi)) fail(field, "in [" + str(lo) + ", " + str(hi) + "]", str(v));
}

void check_token(const char* field, int32_t id, int64_t vocab_size) {
  if (id < 0 || id >= vocab_size)
    fail(field, "a token id in [0, " + str(vocab_size) + ")", str(id));
}

}  // namespace

void SamplingParams::validate(int64_t vocab_size) const {
  if (n < 1) fail("n", "at least 1", str(n));
  if (!(temperature >= 0.0f) || std::isinf(temperature)) fail("temperature", "non-negative and finite", str(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p", "in (0, 1]", str(top_p));
  if (top_k < -1) fail("top_k", "-1 or 0 (disabled) or at least 1", str(top_k));
  check_range("min_p", min_p, 0.0f, 1.0f);
  check_range("presence_penalty", presence_penalty, -2.0f, 2.0f);
  check_range("frequency_penalty", frequency_penalty, -2.0f, 2.0f);
  if (!(repetition_penalty > 0.0f) || std::isinf(repetition_penalty))
    fail("repetition_penalty", "greater than zero and finite", str(repetition_penalty));
  if (max_tokens < 1) fail("max_tokens", "at least 1", str(max_tokens));
  if (min_tokens < 0) fail("min_tokens", "at least 0", str(min_tokens));
  if (min_tokens > max_tokens)
    fail("min_tokens", "at most max_tokens (" + str(max_tokens) + ")", str(min_tokens));
  for (const std::string& s : stop)
    if (s.empty()) throw ParamError("stop", "stop must not contain an empty string");
  for (int32_t id : stop_token_ids) check_token("stop_token_ids", id, vocab_size);
  const std::string lp_rule = "in [0, " + str(kMaxLogprobs) + "]";
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs)) fail("logprobs", lp_rule, str(*logprobs));
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxLogprobs))
    fail("prompt_logprobs", lp_rule, str(*prompt_logprobs));
  for (const auto& [id, bias] : logit_bias) {
    check_token("logit_bias", id, vocab_size);
    check_range("logit_bias", bias, -100.0f, 100.0f);
  }
}

}  // namespace kimi
