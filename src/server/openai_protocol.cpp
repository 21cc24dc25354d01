#include "server/openai_protocol.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "server/api_error.h"
#include "server/kv_transfer_json.h"

namespace kimi {

ojson error_body(int status, const std::string& message, const std::string& param) {
  const char* type = status == 401   ? "AuthenticationError"
                     : status == 404 ? "NotFoundError"
                     : status == 413 ? "RequestTooLargeError"
                     : status == 429 ? "RateLimitError"
                     : status == 503 ? "ServiceUnavailableError"
                     : status >= 500 ? "InternalServerError"
                                     : "BadRequestError";
  ojson e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}};
  if (!param.empty()) e["param"] = param;
  return {{"error", e}};
}

namespace {

// Typed access to optional request fields; null counts as absent (as in the OpenAI SDKs).
class Fields {
 public:
  explicit Fields(const ojson& j) : j_(j) {
    if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  }
  const ojson* find(const char* k) const {
    auto it = j_.find(k);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* k) const { return find(k) != nullptr; }
  std::string str(const char* k, const std::string& def = {}) const {
    const ojson* v = find(k);
    if (!v) return def;
    if (!v->is_string()) bad(k, "a string");
    return v->get<std::string>();
  }
  bool boolean(const char* k, bool def) const {
    const ojson* v = find(k);
    if (!v) return def;
    if (!v->is_boolean()) bad(k, "a boolean");
    return v->get<bool>();
  }
  // A float field. Values beyond float's range are refused here: narrowing them is undefined.
  float number(const char* k, float def) const {
    const ojson* v = find(k);
    return v ? to_float(*v, k) : def;
  }
  static float to_float(const ojson& v, const char* param) {
    if (!v.is_number()) bad(param, "a number");
    const double d = v.get<double>();
    if (!(std::fabs(d) <= double(std::numeric_limits<float>::max())))
      throw ApiError(400, std::string("'") + param + "' is out of range, got " + v.dump(), param);
    return float(d);
  }
  // An integer field, which must lie in [lo, hi]: nothing is narrowed or wrapped silently.
  int64_t integer(const char* k, int64_t def, int64_t lo, int64_t hi) const {
    const ojson* v = find(k);
    return v ? ranged(*v, k, lo, hi) : def;
  }
  // `v` read as an integer in [lo, hi], for the field `param` (also the error's param).
  static int64_t ranged(const ojson& v, const char* param, int64_t lo, int64_t hi,
                        const char* what = nullptr) {
    if (!v.is_number_integer()) bad(param, what ? what : "an integer");
    // JSON integers above INT64_MAX arrive as unsigned; reading them as int64 would wrap.
    const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
    const int64_t x = too_big ? 0 : v.get<int64_t>();
    if (too_big || x < lo || x > hi)
      throw ApiError(400, std::string("'") + param + "' must be " + (what ? what : "an integer") + " between " +
                              std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v.dump(),
                     param);
    return x;
  }
  [[noreturn]] static void bad(const char* k, const char* what) {
    throw ApiError(400, std::string("'") + k + "' must be " + what, k);
  }

 private:
  const ojson& j_;
};

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A JSON Schema given as an object (or boolean) or as its JSON text.
std::string schema_text(const ojson& v, const char* param) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) return v.get<std::string>();
  throw ApiError(400, std::string("'") + param + "' must be a JSON schema (an object)", param);
}

std::string choice_text(const ojson& v, const char* param) {
  if (!v.is_array() || v.empty()) throw ApiError(400, std::string("'") + param + "' must be a non-empty list of strings", param);
  for (const auto& c : v)
    if (!c.is_string()) throw ApiError(400, std::string("'") + param + "' must be a non-empty list of strings", param);
  return v.dump();
}

std::string string_field(const ojson& v, const char* param) {
  if (!v.is_string()) throw ApiError(400, std::string("'") + param + "' must be a string", param);
  return v.get<std::string>();
}

// Structured outputs: response_format (OpenAI), structured_outputs and the older guided_* fields
// (vLLM), at most one of them. The spec is compiled (and an unsupported schema feature refused,
// naming it) by Engine::validate.
void parse_structured(const Fields& f, ApiRequest& r) {
  using structured::SpecKind;
  structured::StructuredSpec spec;
  auto set = [&](SpecKind kind, std::string text, const char* param) {
    if (spec.active())
      throw ApiError(400, "only one structured output may be given ('" + spec.param + "' and '" + param + "')", param);
    spec = {kind, std::move(text), param};
  };
  if (const ojson* rf = f.find("response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      Fields::bad("response_format", "an object with a 'type'");
    const std::string t = (*rf)["type"].get<std::string>();
    if (t == "json_object") {
      r.json_object = true;
      set(SpecKind::JsonObject, "", "response_format");
    } else if (t == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        throw ApiError(400, "response_format json_schema needs 'json_schema': {name, schema, strict}", "response_format");
      if (js->contains("name") && !(*js)["name"].is_string()) Fields::bad("response_format", "json_schema.name as a string");
      if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null())
        Fields::bad("response_format", "json_schema.strict as a boolean");
      const auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null())
        throw ApiError(400, "response_format json_schema needs 'json_schema.schema'", "response_format");
      set(SpecKind::JsonSchema, schema_text(*schema, "response_format"), "response_format");
    } else if (t != "text") {
      throw ApiError(400, "response_format type '" + t + "' is not supported (text, json_object, json_schema)", "response_format");
    }
  }
  if (const ojson* so = f.find("structured_outputs")) {
    if (!so->is_object()) Fields::bad("structured_outputs", "an object");
    const Fields g(*so);
    if (const ojson* v = g.find("json")) set(SpecKind::JsonSchema, schema_text(*v, "structured_outputs"), "structured_outputs");
    if (const ojson* v = g.find("regex")) set(SpecKind::Regex, string_field(*v, "structured_outputs"), "structured_outputs");
    if (const ojson* v = g.find("choice")) set(SpecKind::Choice, choice_text(*v, "structured_outputs"), "structured_outputs");
    if (const ojson* v = g.find("grammar")) set(SpecKind::Grammar, string_field(*v, "structured_outputs"), "structured_outputs");
    if (g.boolean("json_object", false)) set(SpecKind::JsonObject, "", "structured_outputs");
    if (g.has("structural_tag"))
      throw ApiError(400, "structured_outputs.structural_tag is not supported", "structured_outputs");
  }
  if (const ojson* v = f.find("guided_json")) set(SpecKind::JsonSchema, schema_text(*v, "guided_json"), "guided_json");
  if (const ojson* v = f.find("guided_regex")) set(SpecKind::Regex, string_field(*v, "guided_regex"), "guided_regex");
  if (const ojson* v = f.find("guided_choice")) set(SpecKind::Choice, choice_text(*v, "guided_choice"), "guided_choice");
  if (const ojson* v = f.find("guided_grammar")) set(SpecKind::Grammar, string_field(*v, "guided_grammar"), "guided_grammar");
  r.params.structured = std::move(spec);
}

void parse_common(const Fields& f, ApiRequest& r) {
  r.model = f.str("model");
  r.stream = f.boolean("stream", false);
  if (const ojson* so = f.find("stream_options")) {
    if (!so->is_object()) Fields::bad("stream_options", "an object");
    const Fields s(*so);
    r.include_usage = s.boolean("include_usage", false);
    r.continuous_usage = s.boolean("continuous_usage_stats", false);
  }
  SamplingParams& p = r.params;
  p.n = int(f.integer("n", 1, 1, 16));
  p.temperature = f.number("temperature", 1.0f);
  p.top_p = f.number("top_p", 1.0f);
  p.top_k = int(f.integer("top_k", 0, -1, kInt32Max));
  p.min_p = f.number("min_p", 0.0f);
  p.presence_penalty = f.number("presence_penalty", 0.0f);
  p.frequency_penalty = f.number("frequency_penalty", 0.0f);
  p.repetition_penalty = f.number("repetition_penalty", 1.0f);
  // Any 64-bit seed (vLLM's range); a negative one is used as its two's complement.
  if (f.has("seed")) p.seed = uint64_t(f.integer("seed", 0, kInt64Min, kInt64Max));
  p.min_tokens = f.integer("min_tokens", 0, 0, kInt64Max);
  p.ignore_eos = f.boolean("ignore_eos", false);
  p.include_stop_str_in_output = f.boolean("include_stop_str_in_output", false);
  p.skip_special_tokens = f.boolean("skip_special_tokens", true);
  if (const ojson* s = f.find("stop")) {
    if (s->is_string()) p.stop = {s->get<std::string>()};
    else if (s->is_array()) {
      for (const auto& x : *s) {
        if (!x.is_string()) Fields::bad("stop", "a string or a list of strings");
        if (!x.get<std::string>().empty()) p.stop.push_back(x.get<std::string>());
      }
    } else Fields::bad("stop", "a string or a list of strings");
  }
  if (const ojson* s = f.find("stop_token_ids")) {
    if (!s->is_array()) Fields::bad("stop_token_ids", "a list of integers");
    for (const auto& x : *s) {
      p.stop_token_ids.push_back(int32_t(Fields::ranged(x, "stop_token_ids", 0, kInt32Max, "a list of token ids")));
    }
  }
  if (const ojson* b = f.find("logit_bias")) {
    if (!b->is_object()) Fields::bad("logit_bias", "an object of token id -> bias");
    for (const auto& [k, v] : b->items()) {
      if (!v.is_number()) Fields::bad("logit_bias", "an object of token id -> bias");
      // Keys are decimal token ids: digits only, within int32 (no sign, space or wrap-around).
      int64_t id = 0;
      bool ok = !k.empty() && k.size() <= 10;
      for (char ch : k) {
        ok = ok && ch >= '0' && ch <= '9';
        if (ok) id = id * 10 + (ch - '0');
      }
      if (!ok || id > kInt32Max)
        throw ApiError(400, "logit_bias keys must be token ids, got '" + k + "'", "logit_bias");
      p.logit_bias.emplace_back(int32_t(id), Fields::to_float(v, "logit_bias"));
    }
  }
  r.priority = int(f.integer("priority", 0, kInt32Min, kInt32Max));
  r.request_id = f.str("request_id");
  if (f.has("user")) (void)f.str("user");  // accepted, only type-checked
  // max_completion_tokens is the newer name of max_tokens (chat); either may be given.
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (f.has(k)) {
      p.max_tokens = f.integer(k, 16, 1, kInt64Max);
      r.max_tokens_given = true;
    }
  }
  // vLLM returns prompt logprobs in the whole response only (see serving.cpp).
  if (f.has("prompt_logprobs")) {
    p.prompt_logprobs = int(f.integer("prompt_logprobs", 0, 0, kMaxLogprobs));
    if (r.stream) throw ApiError(400, "'prompt_logprobs' is not available when 'stream' is true", "prompt_logprobs");
  }
  parse_structured(f, r);
  if (const ojson* k = f.find("kv_transfer_params")) r.params.kv_transfer_params = parse_kv_transfer_params(*k);
}

std::vector<int32_t> token_list(const ojson& v) {
  std::vector<int32_t> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer()) Fields::bad("prompt", "a string, a list of strings, or token ids");
    ids.push_back(int32_t(Fields::ranged(x, "prompt", 0, kInt32Max, "a token id")));
  }
  return ids;
}

// Content part types that carry media. This server runs text-only models, so they are refused
// with a clear error rather than dropped (vLLM answers a text-only model the same way); nothing
// they point at (URLs, files, base64 data) is ever read.
bool is_media_part(const std::string& t) {
  for (const char* m : {"image_url", "image", "input_image", "image_pil", "image_embeds", "input_audio", "audio",
                        "audio_url", "video_url", "video", "file", "input_file"})
    if (t == m) return true;
  return false;
}

void check_message(const ojson& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) throw ApiError(400, where + " must be an object", "messages");
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) throw ApiError(400, where + ".role must be a string", "messages");
  const std::string r = role->get<std::string>();
  if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
    throw ApiError(400, where + ".role '" + r + "' is not one of system, developer, user, assistant, tool", "messages");
  auto content = m.find("content");
  if (content != m.end() && !content->is_null() && !content->is_string()) {
    if (!content->is_array()) throw ApiError(400, where + ".content must be a string or a list of parts", "messages");
    for (size_t j = 0; j < content->size(); ++j) {
      const ojson& part = (*content)[j];
      const std::string at = where + ".content[" + std::to_string(j) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        throw ApiError(400, at + " must be an object with a 'type'", "messages");
      const std::string t = part["type"].get<std::string>();
      if (is_media_part(t))
        throw ApiError(400, at + " is a '" + t + "' part, but this model takes text only: image, audio, video " +
                                "and file inputs are not supported", "messages");
      if (t != "text") throw ApiError(400, at + ": unknown content part type '" + t + "'", "messages");
      if (!(part.contains("text") && part["text"].is_string()))
        throw ApiError(400, at + ": a text part needs a string 'text'", "messages");
    }
  }
  if (r == "user" && (content == m.end() || content->is_null()))
    throw ApiError(400, where + ": a user message needs content", "messages");
  if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null() && !tc->is_array())
    throw ApiError(400, where + ".tool_calls must be a list", "messages");
}

}  // namespace

ApiRequest parse_completion_request(const ojson& body) {
  const Fields f(body);
  ApiRequest r;
  parse_common(f, r);
  const ojson* prompt = f.find("prompt");
  if (!prompt) throw ApiError(400, "'prompt' is required", "prompt");
  if (prompt->is_string()) {
    r.prompts.push_back({prompt->get<std::string>(), {}});
  } else if (prompt->is_array() && !prompt->empty()) {
    if ((*prompt)[0].is_string()) {
      for (const auto& p : *prompt) {
        if (!p.is_string()) Fields::bad("prompt", "a string, a list of strings, or token ids");
        r.prompts.push_back({p.get<std::string>(), {}});
      }
    } else if ((*prompt)[0].is_array()) {
      for (const auto& p : *prompt) {
        if (!p.is_array()) Fields::bad("prompt", "a string, a list of strings, or token ids");
        r.prompts.push_back({std::nullopt, token_list(p)});
      }
    } else {
      r.prompts.push_back({std::nullopt, token_list(*prompt)});
    }
  } else {
    Fields::bad("prompt", "a non-empty string, list of strings, or token ids");
  }
  r.echo = f.boolean("echo", false);
  if (f.has("logprobs")) r.params.logprobs = int(f.integer("logprobs", 0, 0, kMaxLogprobs));
  if (f.has("suffix")) throw ApiError(400, "'suffix' is not supported", "suffix");
  if (f.has("best_of") && f.integer("best_of", 1, 1, kInt32Max) != r.params.n)
    throw ApiError(400, "'best_of' other than n is not supported", "best_of");
  // A transfer carries one prompt's KV: a batch of prompts is served without it (the producer
  // holds nothing and answers no kv_transfer_params; the decode side computes each prompt), as
  // for n > 1 in the engine, so a proxy's request never fails for asking.
  if (r.prompts.size() != 1) r.params.kv_transfer_params.reset();
  return r;
}

ApiRequest parse_chat_request(const ojson& body) {
  const Fields f(body);
  ApiRequest r;
  parse_common(f, r);
  const ojson* msgs = f.find("messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) throw ApiError(400, "'messages' must be a non-empty list", "messages");
  for (size_t i = 0; i < msgs->size(); ++i) check_message((*msgs)[i], i);
  r.messages = *msgs;
  r.logprobs_flag = f.boolean("logprobs", false);
  const int64_t top = f.integer("top_logprobs", 0, 0, kMaxLogprobs);
  if (f.has("top_logprobs") && !r.logprobs_flag)
    throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  if (r.logprobs_flag) r.params.logprobs = int(top);
  if (const ojson* tools = f.find("tools")) {
    if (!tools->is_array()) Fields::bad("tools", "a list");
    for (const auto& t : *tools) {
      if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
          !t["function"]["name"].is_string())
        throw ApiError(400, "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools");
    }
    if (!tools->empty()) r.tools = *tools;
  }
  r.parallel_tool_calls = f.boolean("parallel_tool_calls", true);
  if (const ojson* tc = f.find("tool_choice")) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
        throw ApiError(400, "'tool_choice' must be auto, none, required or a named function", "tool_choice");
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      r.tool_choice = "named";
      r.tool_choice_name = (*tc)["function"]["name"].get<std::string>();
    } else {
      Fields::bad("tool_choice", "auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tools.is_null())
      throw ApiError(400, "'tool_choice' " + r.tool_choice + " needs 'tools'", "tool_choice");
    if (r.tool_choice == "named") {
      bool found = false;
      for (const auto& t : r.tools) found |= t["function"]["name"] == r.tool_choice_name;
      if (!found) throw ApiError(400, "tool_choice names '" + r.tool_choice_name + "', which is not in 'tools'", "tool_choice");
    }
  }
  if (const ojson* k = f.find("chat_template_kwargs")) {
    if (!k->is_object()) Fields::bad("chat_template_kwargs", "an object");
    r.chat_template_kwargs = *k;
  }
  r.add_generation_prompt = f.boolean("add_generation_prompt", true);
  r.continue_final_message = f.boolean("continue_final_message", false);
  if (r.continue_final_message && r.add_generation_prompt)
    throw ApiError(400, "'continue_final_message' and 'add_generation_prompt' cannot both be true (set "
                        "add_generation_prompt to false to continue the final message)", "continue_final_message");
  return r;
}

}  // namespace kimi
