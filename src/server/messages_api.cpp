#include "server/messages_api.h"

#include <utility>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace kimi {

namespace {

using json_fields::bad;
using json_fields::field;

// The string j[k]; otherwise a 400 against this API's request parameter.
std::string string_field(const ojson& j, const char* k, const std::string& where) {
  return json_fields::string_field(j, k, where, "messages");
}

// Block types that carry media or files: the 400 chat's image parts get (text-only models).
bool is_media_block(const std::string& t) {
  return t == "image" || t == "document" || t == "file" || t == "container_upload";
}

[[noreturn]] void media_refused(const std::string& at, const std::string& t) {
  throw ApiError(400, at + " is an '" + t + "' block, but this model takes text only: image, audio, video and file " +
                          "inputs are not supported", "messages");
}

// The text of a string or of a list of text blocks (system, tool_result content).
std::string block_text(const ojson& v, const std::string& where, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(where, "a string or a list of text blocks", param);
  std::string text;
  for (size_t j = 0; j < v.size(); ++j) {
    const ojson& b = v[j];
    const std::string at = where + "[" + std::to_string(j) + "]";
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) bad(at, "an object with a 'type'", param);
    const std::string t = b["type"].get<std::string>();
    if (is_media_block(t)) media_refused(at, t);
    if (t != "text") throw ApiError(400, at + ": block type '" + t + "' is not supported here", param);
    if (!b.contains("text") || !b["text"].is_string()) bad(at + ".text", "a string", param);
    if (!text.empty()) text += "\n";
    text += b["text"].get<std::string>();
  }
  return text;
}

void add_user(ojson& out, ojson& parts) {
  if (parts.empty()) return;
  out.push_back({{"role", "user"}, {"content", parts}});
  parts = ojson::array();
}

// One Anthropic message as chat messages: a user message may hold tool results, which become
// tool messages in their place among its text.
void add_message(ojson& out, const ojson& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) bad(where, "an object", "messages");
  const std::string role = string_field(m, "role", where);
  if (role != "user" && role != "assistant")
    throw ApiError(400, where + ".role must be 'user' or 'assistant', got '" + role + "'", "messages");
  const ojson* content = field(m, "content");
  if (!content) throw ApiError(400, where + ".content is required", "messages");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array()) bad(where + ".content", "a string or a list of content blocks", "messages");
  ojson parts = ojson::array(), calls = ojson::array();
  std::string text, thinking;
  for (size_t j = 0; j < content->size(); ++j) {
    const ojson& b = (*content)[j];
    const std::string at = where + ".content[" + std::to_string(j) + "]";
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) bad(at, "an object with a 'type'", "messages");
    const std::string t = b["type"].get<std::string>();
    if (is_media_block(t)) media_refused(at, t);
    if (t == "text") {
      const std::string s = string_field(b, "text", at);
      if (role == "user") parts.push_back({{"type", "text"}, {"text", s}});
      else text += s;
    } else if (t == "tool_result" && role == "user") {
      add_user(out, parts);
      const std::string id = string_field(b, "tool_use_id", at);
      std::string result = field(b, "content") ? block_text(b["content"], at + ".content", "messages") : "";
      // The model reads a failed call's result as an error only if the text says so.
      if (const ojson* e = field(b, "is_error"); e && e->is_boolean() && e->get<bool>()) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else if (t == "tool_use" && role == "assistant") {
      const std::string id = string_field(b, "id", at), name = string_field(b, "name", at);
      const ojson* input = field(b, "input");
      if (input && !input->is_object()) bad(at + ".input", "an object", "messages");
      calls.push_back({{"id", id}, {"type", "function"},
                       {"function", {{"name", name}, {"arguments", dump_json(input ? *input : ojson::object())}}}});
    } else if (t == "thinking" && role == "assistant") {
      thinking += string_field(b, "thinking", at);
    } else if (t == "redacted_thinking" && role == "assistant") {
      // Encrypted reasoning of another model: nothing this model can read.
    } else {
      throw ApiError(400, at + ": block type '" + t + "' is not supported in a " + role + " message", "messages");
    }
  }
  if (role == "user") {
    add_user(out, parts);
    return;
  }
  ojson msg = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!calls.empty()) msg["tool_calls"] = calls;
  out.push_back(std::move(msg));
}

ojson tools_json(const ojson& tools) {
  if (!tools.is_array()) bad("tools", "a list", "tools");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad(at, "an object", "tools");
    if (const ojson* type = field(t, "type"); type && !(type->is_string() && *type == "custom"))
      throw ApiError(400, at + ": tool type " + type->dump() + " is not supported (only client tools with an " +
                              "input_schema)", "tools");
    const ojson* name = field(t, "name");
    if (!name || !name->is_string()) bad(at + ".name", "a string", "tools");
    const ojson* schema = field(t, "input_schema");
    if (!schema || !schema->is_object()) bad(at + ".input_schema", "an object (a JSON schema)", "tools");
    ojson fn = {{"name", *name}};
    if (const ojson* d = field(t, "description")) {
      if (!d->is_string()) bad(at + ".description", "a string", "tools");
      fn["description"] = *d;
    }
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

void tool_choice_json(const ojson& tc, ojson& chat) {
  if (!tc.is_object() || !tc.contains("type") || !tc["type"].is_string())
    bad("tool_choice", "an object with a 'type' (auto, any, tool or none)", "tool_choice");
  const std::string t = tc["type"].get<std::string>();
  if (t == "auto") chat["tool_choice"] = "auto";
  else if (t == "any") chat["tool_choice"] = "required";
  else if (t == "none") chat["tool_choice"] = "none";
  else if (t == "tool") {
    const ojson* name = field(tc, "name");
    if (!name || !name->is_string()) bad("tool_choice.name", "a string", "tool_choice");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    throw ApiError(400, "tool_choice type '" + t + "' is not one of auto, any, tool, none", "tool_choice");
  }
  if (const ojson* p = field(tc, "disable_parallel_tool_use")) {
    if (!p->is_boolean()) bad("tool_choice.disable_parallel_tool_use", "a boolean", "tool_choice");
    if (p->get<bool>()) chat["parallel_tool_calls"] = false;
  }
}

bool thinking_on(const ojson* thinking) {
  if (!thinking) return false;  // Anthropic's default: no thinking blocks
  if (!thinking->is_object() || !thinking->contains("type") || !(*thinking)["type"].is_string())
    bad("thinking", "an object with a 'type' (enabled or disabled)", "thinking");
  const std::string t = (*thinking)["type"].get<std::string>();
  if (t == "enabled" || t == "adaptive") return true;
  if (t == "disabled") return false;
  throw ApiError(400, "thinking type '" + t + "' is not one of enabled, disabled, adaptive", "thinking");
}

const char* anthropic_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string stop_reason_of(const ojson& finish) {
  if (finish == "tool_calls") return "tool_use";
  if (finish == "length") return "max_tokens";
  return "end_turn";
}

// ---------------------------------------------------------------------------------------------
class MessagesStream : public ChatStreamTranslator {
 public:
  MessagesStream(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}

  std::string begin(int64_t prompt_tokens) override {
    const ojson message = {{"id", id_},           {"type", "message"},       {"role", "assistant"},
                           {"model", model_},     {"content", ojson::array()}, {"stop_reason", nullptr},
                           {"stop_sequence", nullptr},
                           {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) +
           sse_event("ping", {{"type", "ping"}});
  }

  std::string chunk(const ojson& c) override {
    std::string out;
    if (const ojson* u = field(c, "usage"); u && u->contains("completion_tokens"))
      output_tokens_ = (*u)["completion_tokens"].get<int64_t>();
    const ojson* choices = field(c, "choices");
    if (!choices || !choices->is_array() || choices->empty()) return out;
    const ojson& choice = (*choices)[0];
    if (const ojson* delta = field(choice, "delta")) {
      if (const ojson* r = field(*delta, "reasoning_content"); r && r->is_string() && !r->get_ref<const std::string&>().empty()) {
        if (open_ != Kind::Thinking) out += open(Kind::Thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        out += delta_event({{"type", "thinking_delta"}, {"thinking", *r}});
      }
      if (const ojson* t = field(*delta, "content"); t && t->is_string() && !t->get_ref<const std::string&>().empty()) {
        if (open_ != Kind::Text) out += open(Kind::Text, {{"type", "text"}, {"text", ""}});
        out += delta_event({{"type", "text_delta"}, {"text", *t}});
      }
      if (const ojson* calls = field(*delta, "tool_calls"); calls && calls->is_array()) {
        for (const auto& call : *calls) {
          const ojson fn = call.value("function", ojson::object());
          if (call.contains("id"))
            out += open(Kind::Tool, {{"type", "tool_use"}, {"id", call["id"]}, {"name", fn.value("name", "")},
                                     {"input", ojson::object()}});
          const std::string args = fn.value("arguments", "");
          if (!args.empty() && open_ == Kind::Tool)
            out += delta_event({{"type", "input_json_delta"}, {"partial_json", args}});
        }
      }
    }
    if (const ojson* f = field(choice, "finish_reason")) {
      stop_reason_ = stop_reason_of(*f);
      if (const ojson* s = field(choice, "stop_reason"); *f == "stop" && s && s->is_string()) {
        stop_reason_ = "stop_sequence";
        stop_sequence_ = *s;
      }
    }
    return out;
  }

  std::string error(const ojson& e) override {
    const ojson& err = e["error"];
    const int status = err.contains("code") && err["code"].is_number_integer() ? err["code"].get<int>() : 500;
    return sse_event("error", anthropic_error_body(status, err.value("message", "internal error")));
  }

  std::string end() override {
    std::string out = close();
    out += sse_event("message_delta", {{"type", "message_delta"},
                                       {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}}},
                                       {"usage", {{"output_tokens", output_tokens_}}}});
    out += sse_event("message_stop", {{"type", "message_stop"}});
    return out;
  }

 private:
  enum class Kind { None, Thinking, Text, Tool };

  std::string close() {
    if (open_ == Kind::None) return {};
    open_ = Kind::None;
    return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }
  std::string open(Kind k, const ojson& block) {
    std::string out = close();
    ++index_;
    open_ = k;
    return out + sse_event("content_block_start",
                           {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  std::string delta_event(const ojson& delta) const {
    return sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
  }

  std::string id_, model_;
  Kind open_ = Kind::None;
  int index_ = -1;
  int64_t output_tokens_ = 0;
  std::string stop_reason_ = "end_turn";
  ojson stop_sequence_ = nullptr;
};

}  // namespace

ojson anthropic_error_body(int status, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
}

ojson messages_to_chat_body(const ojson& body, bool count_only) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  ojson chat = ojson::object();
  if (const ojson* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "a string", "model");
    chat["model"] = *m;
  }
  if (const ojson* mt = field(body, "max_tokens")) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) bad("max_tokens", "an integer of at least 1", "max_tokens");
    if (!count_only) chat["max_tokens"] = *mt;
  } else if (!count_only) {
    throw ApiError(400, "'max_tokens' is required", "max_tokens");
  }
  ojson msgs = ojson::array();
  if (const ojson* s = field(body, "system")) msgs.push_back({{"role", "system"}, {"content", block_text(*s, "system", "system")}});
  const ojson* messages = field(body, "messages");
  if (!messages || !messages->is_array() || messages->empty()) bad("messages", "a non-empty list", "messages");
  for (size_t i = 0; i < messages->size(); ++i) add_message(msgs, (*messages)[i], i);
  // A final assistant message is a prefill: the answer continues its text.
  if (!msgs.empty() && msgs.back()["role"] == "assistant" && !msgs.back().contains("tool_calls")) {
    chat["continue_final_message"] = true;
    chat["add_generation_prompt"] = false;
  }
  chat["messages"] = std::move(msgs);
  if (const ojson* s = field(body, "stop_sequences")) {
    if (!s->is_array()) bad("stop_sequences", "a list of strings", "stop_sequences");
    for (const auto& x : *s)
      if (!x.is_string()) bad("stop_sequences", "a list of strings", "stop_sequences");
    chat["stop"] = *s;
  }
  for (const char* k : {"temperature", "top_p", "top_k"})
    if (const ojson* v = field(body, k)) chat[k] = *v;  // type- and range-checked by the chat parser
  if (const ojson* t = field(body, "tools")) {
    ojson tools = tools_json(*t);
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (const ojson* tc = field(body, "tool_choice")) tool_choice_json(*tc, chat);
  chat["chat_template_kwargs"] = {{"thinking", thinking_on(field(body, "thinking"))}};
  if (const ojson* s = field(body, "stream")) {
    if (!s->is_boolean()) bad("stream", "a boolean", "stream");
    if (!count_only && s->get<bool>()) {
      chat["stream"] = true;
      chat["stream_options"] = {{"include_usage", true}};  // the output token count for message_delta
    }
  }
  return chat;
}

ojson chat_to_message(const ojson& chat, const std::string& id) {
  const ojson& choice = chat.at("choices").at(0);
  const ojson& m = choice.at("message");
  ojson content = ojson::array();
  if (const ojson* r = field(m, "reasoning_content"); r && r->is_string() && !r->get_ref<const std::string&>().empty())
    content.push_back({{"type", "thinking"}, {"thinking", *r}, {"signature", ""}});
  if (const ojson* t = field(m, "content"); t && t->is_string() && !t->get_ref<const std::string&>().empty())
    content.push_back({{"type", "text"}, {"text", *t}});
  if (const ojson* calls = field(m, "tool_calls"))
    for (const auto& call : *calls) {
      const ojson& fn = call.at("function");
      ojson input = ojson::parse(fn.value("arguments", ""), nullptr, false);
      if (!input.is_object()) input = ojson::object();
      content.push_back({{"type", "tool_use"}, {"id", call.at("id")}, {"name", fn.at("name")}, {"input", input}});
    }
  std::string stop_reason = stop_reason_of(choice.value("finish_reason", ojson()));
  ojson stop_sequence = nullptr;
  if (const ojson* s = field(choice, "stop_reason"); choice.value("finish_reason", ojson()) == "stop" && s && s->is_string()) {
    stop_reason = "stop_sequence";
    stop_sequence = *s;
  }
  const ojson& u = chat.at("usage");
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", chat.at("model")},
          {"content", content},
          {"stop_reason", stop_reason},
          {"stop_sequence", stop_sequence},
          {"usage", {{"input_tokens", u.at("prompt_tokens")}, {"output_tokens", u.at("completion_tokens")}}}};
}

std::unique_ptr<ChatStreamTranslator> make_messages_stream_translator(std::string id, std::string model) {
  return std::make_unique<MessagesStream>(std::move(id), std::move(model));
}

std::unique_ptr<ResponseJob> MessagesApi::start(const ojson& body, std::optional<int> data_parallel_rank) {
  const ojson chat = messages_to_chat_body(body);
  std::unique_ptr<ResponseJob> job = serving_.start_chat(chat, data_parallel_rank);
  const std::string id = make_response_id("msg_", counter_);
  const std::string model = chat.contains("model") ? chat["model"].get<std::string>()
                                                   : serving_.config().served_model_names[0];
  return std::make_unique<BridgedJob>(
      std::move(job), [id](const ojson& c) { return chat_to_message(c, id); },
      make_messages_stream_translator(id, model));
}

ojson MessagesApi::count_tokens(const ojson& body) const {
  const ojson counted = serving_.tokenize(messages_to_chat_body(body, true));
  return {{"input_tokens", counted.at("count")}};
}

}  // namespace kimi
