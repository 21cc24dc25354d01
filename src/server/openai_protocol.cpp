#include "server/openai_protocol.h"

#include "server/api_error.h"

namespace kimi {

ojson error_body(int status, const std::string& message, const std::string& param) {
  const char* type = status == 401   ? "AuthenticationError"
                     : status == 404 ? "NotFoundError"
                     : status == 413 ? "RequestTooLargeError"
                     : status == 429 ? "RateLimitError"
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
  double number(const char* k, double def) const {
    const ojson* v = find(k);
    if (!v) return def;
    if (!v->is_number()) bad(k, "a number");
    return v->get<double>();
  }
  int64_t integer(const char* k, int64_t def) const {
    const ojson* v = find(k);
    if (!v) return def;
    if (!v->is_number_integer()) bad(k, "an integer");
    return v->get<int64_t>();
  }
  [[noreturn]] static void bad(const char* k, const char* what) {
    throw ApiError(400, std::string("'") + k + "' must be " + what, k);
  }

 private:
  const ojson& j_;
};

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
  p.n = int(f.integer("n", 1));
  if (p.n < 1 || p.n > 16) throw ApiError(400, "'n' must be between 1 and 16", "n");
  p.temperature = float(f.number("temperature", 1.0));
  p.top_p = float(f.number("top_p", 1.0));
  p.top_k = int(f.integer("top_k", 0));
  p.min_p = float(f.number("min_p", 0.0));
  p.presence_penalty = float(f.number("presence_penalty", 0.0));
  p.frequency_penalty = float(f.number("frequency_penalty", 0.0));
  p.repetition_penalty = float(f.number("repetition_penalty", 1.0));
  if (f.has("seed")) p.seed = uint64_t(f.integer("seed", 0));
  p.min_tokens = f.integer("min_tokens", 0);
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
      if (!x.is_number_integer()) Fields::bad("stop_token_ids", "a list of integers");
      p.stop_token_ids.push_back(x.get<int32_t>());
    }
  }
  if (const ojson* b = f.find("logit_bias")) {
    if (!b->is_object()) Fields::bad("logit_bias", "an object of token id -> bias");
    for (const auto& [k, v] : b->items()) {
      if (!v.is_number()) Fields::bad("logit_bias", "an object of token id -> bias");
      try {
        size_t used = 0;
        const int id = std::stoi(k, &used);
        if (used != k.size()) throw 0;
        p.logit_bias.emplace_back(id, v.get<float>());
      } catch (...) {
        throw ApiError(400, "logit_bias keys must be token ids, got '" + k + "'", "logit_bias");
      }
    }
  }
  r.priority = int(f.integer("priority", 0));
  r.request_id = f.str("request_id");
  if (f.has("user")) (void)f.str("user");  // accepted, only type-checked
  // max_completion_tokens is the newer name of max_tokens (chat); either may be given.
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (f.has(k)) {
      p.max_tokens = f.integer(k, 16);
      if (p.max_tokens < 1) throw ApiError(400, std::string("'") + k + "' must be at least 1", k);
      r.max_tokens_given = true;
    }
  }
}

std::vector<int32_t> token_list(const ojson& v) {
  std::vector<int32_t> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer()) Fields::bad("prompt", "a string, a list of strings, or token ids");
    ids.push_back(x.get<int32_t>());
  }
  return ids;
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
    for (const auto& part : *content) {
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        throw ApiError(400, where + ".content parts must be objects with a 'type'", "messages");
      const std::string t = part["type"].get<std::string>();
      if (t == "text" && !(part.contains("text") && part["text"].is_string()))
        throw ApiError(400, where + ": a text part needs a string 'text'", "messages");
      if (t != "text" && t != "image_url" && t != "input_audio" && t != "video_url")
        throw ApiError(400, where + ": unknown content part type '" + t + "'", "messages");
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
  if (f.has("logprobs")) r.params.logprobs = int(f.integer("logprobs", 0));
  if (f.has("prompt_logprobs")) r.params.prompt_logprobs = int(f.integer("prompt_logprobs", 0));
  if (f.has("suffix")) throw ApiError(400, "'suffix' is not supported", "suffix");
  if (f.has("best_of") && f.integer("best_of", 1) != r.params.n)
    throw ApiError(400, "'best_of' other than n is not supported", "best_of");
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
  const int64_t top = f.integer("top_logprobs", 0);
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
  if (const ojson* rf = f.find("response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      Fields::bad("response_format", "an object with a 'type'");
    const std::string t = (*rf)["type"].get<std::string>();
    if (t == "json_object") r.json_object = true;
    else if (t != "text") throw ApiError(400, "response_format type '" + t + "' is not supported", "response_format");
  }
  return r;
}

}  // namespace kimi
