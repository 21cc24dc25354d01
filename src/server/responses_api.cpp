#include "server/responses_api.h"

#include <chrono>
#include <utility>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace kimi {

namespace {

using json_fields::bad;
using json_fields::field;

// The string j[k]; otherwise a 400 against this API's request parameter.
std::string input_string(const ojson& j, const char* k, const std::string& where) {
  return json_fields::string_field(j, k, where, "input");
}

bool is_input_media(const std::string& t) {
  return t == "input_image" || t == "input_file" || t == "input_audio" || t == "image_url" || t == "image" ||
         t == "file";
}

// The text of a message item's content: a string, or input_text / output_text parts joined.
std::string content_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(where, "a string or a list of content parts", "input");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const ojson& p = content[j];
    const std::string at = where + "[" + std::to_string(j) + "]";
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) bad(at, "an object with a 'type'", "input");
    const std::string t = p["type"].get<std::string>();
    if (is_input_media(t))
      throw ApiError(400, at + " is an '" + t + "' part, but this model takes text only: image, audio, video and " +
                              "file inputs are not supported", "input");
    if (t == "input_text" || t == "output_text" || t == "text") text += input_string(p, "text", at);
    else if (t == "refusal") text += input_string(p, "refusal", at);
    else throw ApiError(400, at + ": content part type '" + t + "' is not supported", "input");
  }
  return text;
}

// Builds the chat history from input items; consecutive function_call items join the assistant
// message before them (one turn that answers and calls), a reasoning item goes to the next
// assistant message.
class History {
 public:
  void message(const std::string& role, std::string text) {
    if (role == "assistant") {
      ojson m = {{"role", "assistant"}, {"content", std::move(text)}};
      take_reasoning(m);
      msgs_.push_back(std::move(m));
      open_assistant_ = true;
      return;
    }
    msgs_.push_back({{"role", role}, {"content", ojson::array({{{"type", "text"}, {"text", std::move(text)}}})}});
    open_assistant_ = false;
  }
  void call(std::string id, std::string name, std::string arguments) {
    if (!open_assistant_) {
      ojson m = {{"role", "assistant"}, {"content", ""}};
      take_reasoning(m);
      msgs_.push_back(std::move(m));
      open_assistant_ = true;
    }
    ojson& m = msgs_.back();
    if (!m.contains("tool_calls")) m["tool_calls"] = ojson::array();
    m["tool_calls"].push_back(
        {{"id", std::move(id)}, {"type", "function"}, {"function", {{"name", std::move(name)}, {"arguments", std::move(arguments)}}}});
  }
  void output(std::string id, std::string text) {
    msgs_.push_back({{"role", "tool"}, {"tool_call_id", std::move(id)}, {"content", std::move(text)}});
    open_assistant_ = false;
  }
  void reasoning(const std::string& text) { reasoning_ += text; }
  ojson take() { return std::move(msgs_); }

 private:
  void take_reasoning(ojson& m) {
    if (!reasoning_.empty()) m["reasoning_content"] = std::exchange(reasoning_, {});
  }
  ojson msgs_ = ojson::array();
  std::string reasoning_;
  bool open_assistant_ = false;
};

void add_item(History& h, const ojson& item, size_t i) {
  const std::string at = "input[" + std::to_string(i) + "]";
  if (!item.is_object()) bad(at, "an object", "input");
  std::string type = "message";  // the SDKs' easy input message {role, content} has no type
  if (const ojson* t = field(item, "type")) {
    if (!t->is_string()) bad(at + ".type", "a string", "input");
    type = t->get<std::string>();
  }
  if (type == "message") {
    const std::string role = input_string(item, "role", at);
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      throw ApiError(400, at + ".role must be user, assistant, system or developer, got '" + role + "'", "input");
    const ojson* content = field(item, "content");
    if (!content) throw ApiError(400, at + ".content is required", "input");
    h.message(role, content_text(*content, at + ".content"));
  } else if (type == "function_call") {
    h.call(input_string(item, "call_id", at), input_string(item, "name", at), input_string(item, "arguments", at));
  } else if (type == "function_call_output") {
    const ojson* out = field(item, "output");
    if (!out) throw ApiError(400, at + ".output is required", "input");
    h.output(input_string(item, "call_id", at), content_text(*out, at + ".output"));
  } else if (type == "reasoning") {
    // The reasoning text when the item has it, else its summary.
    std::string text;
    for (const char* k : {"content", "summary"}) {
      if (const ojson* parts = field(item, k); parts && parts->is_array())
        for (const auto& p : *parts)
          if (p.is_object() && p.contains("text") && p["text"].is_string()) text += p["text"].get<std::string>();
      if (!text.empty()) break;
    }
    h.reasoning(text);
  } else {
    throw ApiError(400, at + ": input item type '" + type + "' is not supported", "input");
  }
}

ojson responses_tools(const ojson& tools) {
  if (!tools.is_array()) bad("tools", "a list", "tools");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad(at, "an object", "tools");
    const ojson* type = field(t, "type");
    if (!type || *type != "function")
      throw ApiError(400, at + ": tool type " + (type ? type->dump() : std::string("(none)")) +
                              " is not supported (only function tools)", "tools");
    const ojson* name = field(t, "name");
    if (!name || !name->is_string()) bad(at + ".name", "a string", "tools");
    ojson fn = {{"name", *name}};
    if (const ojson* d = field(t, "description")) fn["description"] = *d;
    if (const ojson* p = field(t, "parameters")) fn["parameters"] = *p;
    if (const ojson* s = field(t, "strict")) fn["strict"] = *s;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

ojson tool_choice_json(const ojson& tc) {
  if (tc.is_string()) return tc;  // auto | none | required, checked by the chat parser
  if (tc.is_object() && tc.contains("type") && tc["type"] == "function" && tc.contains("name") && tc["name"].is_string())
    return {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  bad("tool_choice", "auto, none, required or {\"type\": \"function\", \"name\": ...}", "tool_choice");
}

ojson response_format_json(const ojson& format) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    bad("text.format", "an object with a 'type'", "text");
  const std::string t = format["type"].get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return {{"type", "json_object"}};
  if (t != "json_schema") throw ApiError(400, "text.format type '" + t + "' is not supported", "text");
  const ojson* schema = field(format, "schema");
  if (!schema || !schema->is_object()) bad("text.format.schema", "an object (a JSON schema)", "text");
  const ojson* name = field(format, "name");
  if (name && !name->is_string()) bad("text.format.name", "a string", "text");
  ojson js = {{"name", name ? *name : ojson("response")}, {"schema", *schema}};
  for (const char* k : {"strict", "description"})
    if (const ojson* v = field(format, k)) js[k] = *v;
  return {{"type", "json_schema"}, {"json_schema", js}};
}

// ---------------------------------------------------------------------------------------------
// Response objects.

std::string id_suffix(const std::string& id) { return id.substr(id.find('_') + 1); }

ojson usage_json(const ojson& chat_usage) {
  const int64_t in = chat_usage.value("prompt_tokens", int64_t(0)), out = chat_usage.value("completion_tokens", int64_t(0));
  int64_t cached = 0;
  if (const ojson* d = field(chat_usage, "prompt_tokens_details")) cached = d->value("cached_tokens", int64_t(0));
  return {{"input_tokens", in}, {"input_tokens_details", {{"cached_tokens", cached}}}, {"output_tokens", out},
          {"total_tokens", in + out}};
}

ojson response_object(const ResponseContext& ctx, const std::string& status, ojson output, ojson usage) {
  ojson r = {{"id", ctx.id},
             {"object", "response"},
             {"created_at", ctx.created_at},
             {"status", status},
             {"error", nullptr},
             {"incomplete_details", status == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson()},
             {"model", ctx.model},
             {"output", std::move(output)}};
  for (const auto& [k, v] : ctx.echo.items()) r[k] = v;
  r["usage"] = std::move(usage);
  return r;
}

ojson reasoning_item(const std::string& id, const std::string& text, const char* status) {
  ojson content = ojson::array();
  if (!text.empty() || std::string_view(status) == "completed")
    content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"id", id}, {"type", "reasoning"}, {"summary", ojson::array()}, {"content", content}, {"status", status}};
}

ojson output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
}

ojson message_item(const std::string& id, const ojson& content, const char* status) {
  return {{"id", id}, {"type", "message"}, {"role", "assistant"}, {"status", status}, {"content", content}};
}

ojson call_item(const std::string& id, const ojson& call_id, const ojson& name, const std::string& args,
                const char* status) {
  return {{"id", id}, {"type", "function_call"}, {"call_id", call_id}, {"name", name}, {"arguments", args},
          {"status", status}};
}

std::string status_of(const ojson& finish) { return finish == "length" ? "incomplete" : "completed"; }

// ---------------------------------------------------------------------------------------------
class ResponsesStream : public ChatStreamTranslator {
 public:
  explicit ResponsesStream(ResponseContext ctx) : ctx_(std::move(ctx)), base_(id_suffix(ctx_.id)) {}

  std::string begin(int64_t) override {
    const ojson r = response_object(ctx_, "in_progress", ojson::array(), nullptr);
    std::string out = event("response.created", {{"response", r}});
    return out + event("response.in_progress", {{"response", r}});
  }

  std::string chunk(const ojson& c) override {
    std::string out;
    if (const ojson* u = field(c, "usage")) usage_ = *u;
    const ojson* choices = field(c, "choices");
    if (!choices || !choices->is_array() || choices->empty()) return out;
    const ojson& choice = (*choices)[0];
    if (const ojson* delta = field(choice, "delta")) {
      if (const ojson* r = field(*delta, "reasoning_content"); r && r->is_string() && !r->get_ref<const std::string&>().empty()) {
        if (open_ != Kind::Reasoning) out += open_reasoning();
        text_ += r->get<std::string>();
        out += event("response.reasoning_text.delta", {{"item_id", item_id_}, {"output_index", index()},
                                                       {"content_index", 0}, {"delta", *r}});
      }
      if (const ojson* t = field(*delta, "content"); t && t->is_string() && !t->get_ref<const std::string&>().empty()) {
        if (open_ != Kind::Message) out += open_message();
        text_ += t->get<std::string>();
        out += event("response.output_text.delta", {{"item_id", item_id_}, {"output_index", index()},
                                                    {"content_index", 0}, {"delta", *t}, {"logprobs", ojson::array()}});
      }
      if (const ojson* calls = field(*delta, "tool_calls"); calls && calls->is_array())
        for (const auto& call : *calls) {
          const ojson fn = call.value("function", ojson::object());
          if (call.contains("id")) out += open_call(call["id"], fn.value("name", ""));
          const std::string args = fn.value("arguments", "");
          if (args.empty() || open_ != Kind::Call) continue;
          text_ += args;
          out += event("response.function_call_arguments.delta",
                       {{"item_id", item_id_}, {"output_index", index()}, {"delta", args}});
        }
    }
    if (const ojson* f = field(choice, "finish_reason")) status_ = status_of(*f);
    return out;
  }

  std::string error(const ojson& e) override {
    const ojson& err = e["error"];
    return event("error", {{"code", err.contains("code") ? ojson(std::to_string(err["code"].get<int>())) : ojson()},
                           {"message", err.value("message", "internal error")},
                           {"param", err.value("param", ojson())}});
  }

  std::string end() override {
    std::string out = close();
    if (output_.empty()) {  // an answer always has its message
      out += open_message();
      out += close();
    }
    const ojson r = response_object(ctx_, status_, output_, usage_json(usage_));
    return out + event(status_ == "completed" ? "response.completed" : "response.incomplete", {{"response", r}});
  }

 private:
  enum class Kind { None, Reasoning, Message, Call };

  std::string event(const std::string& type, ojson data) {
    ojson e = {{"type", type}, {"sequence_number", seq_++}};
    for (auto& [k, v] : data.items()) e[k] = std::move(v);
    return sse_event(type, e);
  }
  int64_t index() const { return int64_t(output_.size()); }  // the open item's output_index

  std::string added(const ojson& item) { return event("response.output_item.added", {{"output_index", index()}, {"item", item}}); }
  std::string part_added(const ojson& part) {
    return event("response.content_part.added",
                 {{"item_id", item_id_}, {"output_index", index()}, {"content_index", 0}, {"part", part}});
  }
  std::string open_reasoning() {
    std::string out = close();
    open_ = Kind::Reasoning;
    item_id_ = "rs_" + base_ + "_" + std::to_string(index());
    out += added(reasoning_item(item_id_, "", "in_progress"));
    return out + part_added({{"type", "reasoning_text"}, {"text", ""}});
  }
  std::string open_message() {
    std::string out = close();
    open_ = Kind::Message;
    item_id_ = "msg_" + base_ + "_" + std::to_string(index());
    out += added(message_item(item_id_, ojson::array(), "in_progress"));
    return out + part_added(output_text_part(""));
  }
  std::string open_call(const ojson& call_id, const ojson& name) {
    std::string out = close();
    open_ = Kind::Call;
    item_id_ = "fc_" + base_ + "_" + std::to_string(index());
    call_id_ = call_id;
    name_ = name;
    return out + added(call_item(item_id_, call_id, name, "", "in_progress"));
  }
  // Ends the open item: its .done events, then output_item.done, and it joins the output.
  std::string close() {
    std::string out;
    ojson item;
    if (open_ == Kind::Reasoning) {
      const ojson part = {{"type", "reasoning_text"}, {"text", text_}};
      out += event("response.reasoning_text.done", {{"item_id", item_id_}, {"output_index", index()}, {"content_index", 0}, {"text", text_}});
      out += event("response.content_part.done", {{"item_id", item_id_}, {"output_index", index()}, {"content_index", 0}, {"part", part}});
      item = reasoning_item(item_id_, text_, "completed");
    } else if (open_ == Kind::Message) {
      const ojson part = output_text_part(text_);
      out += event("response.output_text.done", {{"item_id", item_id_}, {"output_index", index()}, {"content_index", 0},
                                                 {"text", text_}, {"logprobs", ojson::array()}});
      out += event("response.content_part.done", {{"item_id", item_id_}, {"output_index", index()}, {"content_index", 0}, {"part", part}});
      item = message_item(item_id_, ojson::array({part}), "completed");
    } else if (open_ == Kind::Call) {
      out += event("response.function_call_arguments.done",
                   {{"item_id", item_id_}, {"output_index", index()}, {"name", name_}, {"arguments", text_}});
      item = call_item(item_id_, call_id_, name_, text_, "completed");
    } else {
      return out;
    }
    out += event("response.output_item.done", {{"output_index", index()}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = Kind::None;
    text_.clear();
    return out;
  }

  ResponseContext ctx_;
  std::string base_;
  int64_t seq_ = 0;
  Kind open_ = Kind::None;
  std::string item_id_, text_;
  ojson call_id_, name_;
  ojson output_ = ojson::array();
  ojson usage_ = ojson::object();
  std::string status_ = "completed";
};

}  // namespace

ResponsesRequest responses_to_chat_request(const ojson& body) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  ResponsesRequest r;
  ojson& chat = r.chat;
  ojson& echo = r.echo;
  chat = ojson::object();
  if (const ojson* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "a string", "model");
    chat["model"] = *m;
  }
  for (const char* k : {"previous_response_id", "conversation"})
    if (field(body, k)) throw ApiError(400, std::string("'") + k + "' is not supported: this server stores no responses", k);
  if (const ojson* b = field(body, "background"); b && *b == true)
    throw ApiError(400, "'background' is not supported: this server stores no responses", "background");
  if (const ojson* s = field(body, "store"); s && !s->is_boolean()) bad("store", "a boolean", "store");

  History h;
  ojson instructions = nullptr;
  if (const ojson* ins = field(body, "instructions")) {
    if (!ins->is_string()) bad("instructions", "a string", "instructions");
    instructions = *ins;
    h.message("system", ins->get<std::string>());
  }
  const ojson* input = field(body, "input");
  if (!input) throw ApiError(400, "'input' is required", "input");
  if (input->is_string()) {
    h.message("user", input->get<std::string>());
  } else if (input->is_array() && !input->empty()) {
    for (size_t i = 0; i < input->size(); ++i) add_item(h, (*input)[i], i);
  } else {
    bad("input", "a string or a non-empty list of input items", "input");
  }
  chat["messages"] = h.take();

  if (const ojson* m = field(body, "max_output_tokens")) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1) bad("max_output_tokens", "an integer of at least 1", "max_output_tokens");
    chat["max_tokens"] = *m;
  }
  for (const char* k : {"temperature", "top_p"})
    if (const ojson* v = field(body, k)) chat[k] = *v;
  ojson tools = ojson::array();
  if (const ojson* t = field(body, "tools")) {
    tools = *t;
    ojson chat_tools = responses_tools(*t);
    if (!chat_tools.empty()) chat["tools"] = std::move(chat_tools);
  }
  ojson tool_choice = "auto";
  if (const ojson* tc = field(body, "tool_choice")) {
    tool_choice = *tc;
    chat["tool_choice"] = tool_choice_json(*tc);
  }
  bool parallel = true;
  if (const ojson* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) bad("parallel_tool_calls", "a boolean", "parallel_tool_calls");
    parallel = p->get<bool>();
    chat["parallel_tool_calls"] = parallel;
  }
  ojson text = {{"format", {{"type", "text"}}}};
  if (const ojson* t = field(body, "text")) {
    if (!t->is_object()) bad("text", "an object", "text");
    if (const ojson* f = field(*t, "format")) {
      text["format"] = *f;
      if (ojson rf = response_format_json(*f); !rf.is_null()) chat["response_format"] = std::move(rf);
    }
  }
  ojson reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  bool thinking = true;  // the Kimi template's default
  if (const ojson* re = field(body, "reasoning")) {
    if (!re->is_object()) bad("reasoning", "an object", "reasoning");
    if (const ojson* e = field(*re, "effort")) {
      static constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
      bool known = false;
      for (const char* k : kEfforts) known |= e->is_string() && *e == k;
      if (!known) bad("reasoning.effort", "one of none, minimal, low, medium, high, xhigh", "reasoning");
      reasoning["effort"] = *e;
      thinking = !(*e == "none" || *e == "minimal");
    }
  }
  chat["chat_template_kwargs"] = {{"thinking", thinking}};
  if (const ojson* s = field(body, "stream")) {
    if (!s->is_boolean()) bad("stream", "a boolean", "stream");
    if (s->get<bool>()) {
      chat["stream"] = true;
      chat["stream_options"] = {{"include_usage", true}};  // the usage of response.completed
    }
  }
  ojson metadata = ojson::object();
  if (const ojson* m = field(body, "metadata")) {
    if (!m->is_object()) bad("metadata", "an object", "metadata");
    metadata = *m;
  }
  echo = {{"instructions", instructions},
          {"max_output_tokens", field(body, "max_output_tokens") ? body["max_output_tokens"] : ojson()},
          {"parallel_tool_calls", parallel},
          {"previous_response_id", nullptr},
          {"reasoning", reasoning},
          {"store", false},
          {"temperature", field(body, "temperature") ? body["temperature"] : ojson(1.0)},
          {"text", text},
          {"tool_choice", tool_choice},
          {"tools", tools},
          {"top_p", field(body, "top_p") ? body["top_p"] : ojson(1.0)},
          {"truncation", "disabled"},
          {"user", field(body, "user") ? body["user"] : ojson()},
          {"metadata", metadata}};
  return r;
}

ojson chat_to_response(const ojson& chat, const ResponseContext& ctx) {
  const ojson& choice = chat.at("choices").at(0);
  const ojson& m = choice.at("message");
  const std::string base = id_suffix(ctx.id);
  ojson output = ojson::array();
  auto next_id = [&](const char* prefix) { return prefix + base + "_" + std::to_string(output.size()); };
  if (const ojson* r = field(m, "reasoning_content"); r && r->is_string() && !r->get_ref<const std::string&>().empty())
    output.push_back(reasoning_item(next_id("rs_"), r->get<std::string>(), "completed"));
  const ojson* calls = field(m, "tool_calls");
  const bool called = calls && calls->is_array() && !calls->empty();
  const ojson* content = field(m, "content");
  const std::string text = content && content->is_string() ? content->get<std::string>() : "";
  // An answer always has its message, unless it is only calls.
  if (!text.empty() || (!called && output.empty()))
    output.push_back(message_item(next_id("msg_"), ojson::array({output_text_part(text)}), "completed"));
  if (called)
    for (const auto& call : *calls) {
      const ojson& fn = call.at("function");
      output.push_back(call_item(next_id("fc_"), call.at("id"), fn.at("name"), fn.value("arguments", ""), "completed"));
    }
  ResponseContext c = ctx;
  c.model = chat.value("model", ctx.model);
  return response_object(c, status_of(choice.value("finish_reason", ojson())), std::move(output),
                         usage_json(chat.at("usage")));
}

std::unique_ptr<ChatStreamTranslator> make_responses_stream_translator(ResponseContext ctx) {
  return std::make_unique<ResponsesStream>(std::move(ctx));
}

std::unique_ptr<ResponseJob> ResponsesApi::start(const ojson& body, std::optional<int> data_parallel_rank) {
  ResponsesRequest req = responses_to_chat_request(body);
  std::unique_ptr<ResponseJob> job = serving_.start_chat(req.chat, data_parallel_rank);
  ResponseContext ctx;
  ctx.id = make_response_id("resp_", counter_);
  ctx.model = req.chat.contains("model") ? req.chat["model"].get<std::string>() : serving_.config().served_model_names[0];
  ctx.created_at = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  ctx.echo = std::move(req.echo);
  return std::make_unique<BridgedJob>(
      std::move(job), [ctx](const ojson& c) { return chat_to_response(c, ctx); }, make_responses_stream_translator(ctx));
}

}  // namespace kimi
