#include "server/serving.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "server/api_error.h"
#include "server/parsers/reasoning_parser.h"
#include "server/parsers/tool_parser.h"
#include "tokenizer/chat_template.h"

namespace kimi {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Model output is arbitrary bytes; JSON text must be valid UTF-8, so invalid bytes become U+FFFD.
std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }
std::string sse(const ojson& j) { return "data: " + dump(j) + "\n\n"; }

std::string token_text(const Tokenizer& t, int32_t id) { return std::string(t.token_bytes(id)); }

ojson usage_json(int64_t prompt, int64_t completion, int64_t cached) {
  ojson u = {{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}};
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

// Per-choice accumulation of engine outputs.
struct ChoiceState {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<SampleResult> logprobs;
  FinishReason finish = FinishReason::None;
  std::string stop_reason;
  int32_t stop_token = -1;
  bool finished = false;
};

// Reads every output of a request into per-choice states; throws on an engine error.
void drain(RequestStream& s, std::vector<ChoiceState>& choices, size_t offset, int64_t& completion_tokens,
           int64_t& cached) {
  while (auto o = s.next()) {
    if (!o->error.empty()) throw ApiError(500, o->error);
    ChoiceState& c = choices[offset + size_t(o->index)];
    c.text += o->text;
    c.tokens.insert(c.tokens.end(), o->token_ids.begin(), o->token_ids.end());
    for (auto& lp : o->logprobs) c.logprobs.push_back(std::move(lp));
    if (o->finished) {
      c.finished = true;
      c.finish = o->finish_reason;
      c.stop_reason = o->stop_reason;
      c.stop_token = o->stop_token;
      completion_tokens += o->completion_tokens;
      cached = std::max(cached, o->cached_tokens);
    }
  }
}

// A stop token id is reported as a number, a stop string as a string (as vLLM does).
ojson stop_reason_json(const ChoiceState& c) {
  if (c.stop_token >= 0) return c.stop_token;
  if (c.stop_reason.empty()) return nullptr;
  return c.stop_reason;
}

ojson finish_json(FinishReason r) {
  if (r == FinishReason::None) return nullptr;
  return finish_reason_name(r);
}

// Aborts the job's engine requests when the job ends before they do (client gone, error).
class EngineRequests {
 public:
  explicit EngineRequests(AsyncEngine& e) : engine_(e) {}
  ~EngineRequests() {
    for (const auto& id : ids_) engine_.abort_request(id);  // no-op for finished requests
  }
  EngineRequests(const EngineRequests&) = delete;
  EngineRequests& operator=(const EngineRequests&) = delete;
  void add(std::string id, std::shared_ptr<RequestStream> s) {
    ids_.push_back(std::move(id));
    streams_.push_back(std::move(s));
  }
  std::vector<std::shared_ptr<RequestStream>>& streams() { return streams_; }
  AsyncEngine& engine() { return engine_; }
  // ids_ is complete once submitted, so this may run beside the job's own thread.
  void abort() {
    for (const auto& id : ids_) engine_.abort_request(id);
  }

 private:
  AsyncEngine& engine_;
  std::vector<std::string> ids_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
};

// ---------------------------------------------------------------------------------------------
class CompletionJob : public ResponseJob {
 public:
  CompletionJob(AsyncEngine& e, const Tokenizer& t, ApiRequest r, std::string id, std::string model)
      : reqs_(e), tok_(t), r_(std::move(r)), id_(std::move(id)), model_(std::move(model)), created_(unix_now()) {}

  void submit(std::vector<std::vector<int32_t>> prompts) {
    prompt_ids_ = std::move(prompts);
    for (size_t i = 0; i < prompt_ids_.size(); ++i) {
      const std::string rid = id_ + "-" + std::to_string(i);
      reqs_.add(rid, reqs_.engine().add_request(rid, prompt_ids_[i], r_.params, r_.priority));
    }
  }
  bool streaming() const override { return r_.stream; }
  void cancel() override { reqs_.abort(); }

  ojson collect() override {
    const size_t n = size_t(r_.params.n);
    std::vector<ChoiceState> choices(prompt_ids_.size() * n);
    int64_t completion = 0, cached = 0, prompt = 0;
    for (size_t i = 0; i < prompt_ids_.size(); ++i) {
      drain(*reqs_.streams()[i], choices, i * n, completion, cached);
      prompt += int64_t(prompt_ids_[i].size());
    }
    ojson out = {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}};
    ojson arr = ojson::array();
    for (size_t k = 0; k < choices.size(); ++k) {
      const size_t p = k / n;
      std::string text = choices[k].text;
      if (r_.echo) text = tok_.decode(prompt_ids_[p]) + text;
      ojson c = {{"index", k}, {"text", text}, {"logprobs", logprobs_json(choices[k].logprobs)},
                 {"finish_reason", finish_json(choices[k].finish)}, {"stop_reason", stop_reason_json(choices[k])}};
      arr.push_back(c);
    }
    out["choices"] = arr;
    out["usage"] = usage_json(prompt, completion, cached);
    return out;
  }

  void stream(EventWriter& w) override {
    const size_t n = size_t(r_.params.n);
    int64_t completion = 0, prompt = 0, cached = 0;
    for (size_t i = 0; i < prompt_ids_.size(); ++i) {
      prompt += int64_t(prompt_ids_[i].size());
      if (r_.echo) {
        for (size_t j = 0; j < n; ++j)
          if (!w.write(sse(chunk(i * n + j, tok_.decode(prompt_ids_[i]), {}, nullptr)))) return;
      }
      while (auto o = reqs_.streams()[i]->next()) {
        if (!o->error.empty()) {
          w.write(sse(error_body(500, o->error)));
          return;
        }
        ojson c = chunk(i * n + size_t(o->index), o->text, o->logprobs, o->finished ? finish_json(o->finish_reason) : ojson());
        if (r_.continuous_usage) c["usage"] = usage_json(o->prompt_tokens, o->completion_tokens, o->cached_tokens);
        if (!w.write(sse(c))) return;  // client gone: the destructor aborts the requests
        if (o->finished) completion += o->completion_tokens, cached = std::max(cached, o->cached_tokens);
      }
    }
    if (r_.include_usage) {
      ojson u = {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_},
                 {"choices", ojson::array()}, {"usage", usage_json(prompt, completion, cached)}};
      if (!w.write(sse(u))) return;
    }
    w.write("data: [DONE]\n\n");
  }

 private:
  ojson chunk(size_t index, const std::string& text, const std::vector<SampleResult>& lps, ojson finish) const {
    ojson c = {{"index", index}, {"text", text}, {"logprobs", logprobs_json(lps)}, {"finish_reason", finish}};
    return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}, {"choices", {c}}};
  }
  ojson logprobs_json(const std::vector<SampleResult>& lps) const {
    if (!r_.params.logprobs) return nullptr;
    ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array();
    for (const auto& s : lps) {
      tokens.push_back(token_text(tok_, s.token));
      token_lps.push_back(s.logprob);
      ojson top = ojson::object();
      for (const auto& t : s.top) top[token_text(tok_, t.token)] = t.logprob;
      tops.push_back(top);
    }
    return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", ojson::array()}};
  }

  EngineRequests reqs_;
  const Tokenizer& tok_;
  ApiRequest r_;
  std::string id_, model_;
  int64_t created_;
  std::vector<std::vector<int32_t>> prompt_ids_;
};

// ---------------------------------------------------------------------------------------------
class ChatJob : public ResponseJob {
 public:
  ChatJob(AsyncEngine& e, const Tokenizer& t, ApiRequest r, std::string id, std::string model, bool reasoning,
          bool tools)
      : reqs_(e), tok_(t), r_(std::move(r)), id_(std::move(id)), model_(std::move(model)), created_(unix_now()) {
    const auto& k = r_.chat_template_kwargs;
    const bool thinking = !((k.contains("thinking") && k["thinking"] == false) ||
                            (k.contains("enable_thinking") && k["enable_thinking"] == false));
    reasoning_ = reasoning;
    thinking_ = thinking;
    tools_ = tools && !r_.tools.is_null() && r_.tool_choice != "none";
  }

  void submit(std::vector<int32_t> prompt) {
    prompt_len_ = int64_t(prompt.size());
    reqs_.add(id_, reqs_.engine().add_request(id_, std::move(prompt), r_.params, r_.priority));
  }
  bool streaming() const override { return r_.stream; }
  void cancel() override { reqs_.abort(); }

  ojson collect() override {
    std::vector<ChoiceState> choices(size_t(r_.params.n));
    int64_t completion = 0, cached = 0;
    drain(*reqs_.streams()[0], choices, 0, completion, cached);
    ojson arr = ojson::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const ChoiceState& c = choices[i];
      std::string content = c.text;
      ojson message = {{"role", "assistant"}};
      ojson reasoning = nullptr;
      if (reasoning_) {
        const auto rr = KimiK2ReasoningParser(thinking_).extract(content);
        if (rr.reasoning) reasoning = *rr.reasoning;
        content = rr.content;
      }
      ojson tool_calls = ojson::array();
      bool called = false;
      if (tools_) {
        const auto tr = KimiK2ToolParser().extract(content);
        for (const auto& call : tr.calls)
          tool_calls.push_back({{"id", call.id}, {"type", "function"},
                                {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        called = !tr.calls.empty();
        content = tr.content.value_or("");
      }
      message["content"] = content.empty() && called ? ojson(nullptr) : ojson(content);
      if (reasoning_) message["reasoning_content"] = reasoning, message["reasoning"] = reasoning;
      message["tool_calls"] = tool_calls;
      ojson fr = called && c.finish == FinishReason::Stop ? ojson("tool_calls") : finish_json(c.finish);
      arr.push_back({{"index", i}, {"message", message}, {"logprobs", logprobs_json(c.logprobs)},
                     {"finish_reason", fr}, {"stop_reason", stop_reason_json(c)}});
    }
    return {{"id", id_}, {"object", "chat.completion"}, {"created", created_}, {"model", model_}, {"choices", arr},
            {"usage", usage_json(prompt_len_, completion, cached)}};
  }

  void stream(EventWriter& w) override {
    const size_t n = size_t(r_.params.n);
    std::vector<std::unique_ptr<KimiK2ReasoningParser>> rp(n);
    std::vector<std::unique_ptr<KimiK2ToolParser>> tp(n);
    for (size_t i = 0; i < n; ++i) {
      if (reasoning_) rp[i] = std::make_unique<KimiK2ReasoningParser>(thinking_);
      if (tools_) tp[i] = std::make_unique<KimiK2ToolParser>();
      if (!w.write(sse(chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr)))) return;
    }
    int64_t completion = 0, cached = 0;
    while (auto o = reqs_.streams()[0]->next()) {
      if (!o->error.empty()) {
        w.write(sse(error_body(500, o->error)));
        return;
      }
      const size_t i = size_t(o->index);
      std::string reasoning, content = o->text;
      auto split = [&](KimiK2ReasoningParser::DeltaMessage d) {
        reasoning += d.reasoning;
        return d.content;
      };
      if (rp[i]) content = split(rp[i]->push(content));
      if (o->finished && rp[i]) content += split(rp[i]->finish());
      ojson calls = ojson::array();
      if (tp[i]) {
        auto add = [&](KimiK2ToolParser::StreamDelta d) {
          for (const auto& c : d.tool_calls) {
            ojson fn = {{"arguments", c.arguments}};
            if (c.name) fn["name"] = *c.name;
            ojson call = {{"index", c.index}, {"function", fn}};
            if (c.id) call["id"] = *c.id, call["type"] = "function";
            calls.push_back(call);
          }
          return d.content;
        };
        content = add(tp[i]->push(content));
        if (o->finished) content += add(tp[i]->finish());
      }
      ojson delta = ojson::object();
      if (!reasoning.empty()) delta["reasoning_content"] = reasoning, delta["reasoning"] = reasoning;
      if (!content.empty()) delta["content"] = content;
      if (!calls.empty()) delta["tool_calls"] = calls;
      ojson fr = nullptr;
      if (o->finished) {
        fr = tp[i] && tp[i]->saw_tool_calls() && o->finish_reason == FinishReason::Stop ? ojson("tool_calls")
                                                                                        : finish_json(o->finish_reason);
        completion += o->completion_tokens;
        cached = std::max(cached, o->cached_tokens);
      }
      if (delta.empty() && fr.is_null() && o->logprobs.empty()) continue;  // nothing visible yet
      ojson c = chunk(i, delta, fr);
      c["choices"][0]["logprobs"] = logprobs_json(o->logprobs);
      if (r_.continuous_usage) c["usage"] = usage_json(prompt_len_, o->completion_tokens, o->cached_tokens);
      if (!w.write(sse(c))) return;
    }
    if (r_.include_usage) {
      ojson u = {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_},
                 {"choices", ojson::array()}, {"usage", usage_json(prompt_len_, completion, cached)}};
      if (!w.write(sse(u))) return;
    }
    w.write("data: [DONE]\n\n");
  }

 private:
  ojson chunk(size_t index, ojson delta, ojson finish) const {
    ojson c = {{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish}};
    return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}, {"choices", {c}}};
  }
  ojson logprobs_json(const std::vector<SampleResult>& lps) const {
    if (!r_.params.logprobs || lps.empty()) return nullptr;
    auto entry = [&](int32_t id, float lp) {
      const std::string s = token_text(tok_, id);
      ojson bytes = ojson::array();
      for (unsigned char ch : s) bytes.push_back(int(ch));
      return ojson{{"token", s}, {"logprob", lp}, {"bytes", bytes}};
    };
    ojson content = ojson::array();
    for (const auto& s : lps) {
      ojson e = entry(s.token, s.logprob);
      ojson top = ojson::array();
      for (const auto& t : s.top) top.push_back(entry(t.token, t.logprob));
      e["top_logprobs"] = top;
      content.push_back(e);
    }
    return {{"content", content}};
  }

  EngineRequests reqs_;
  const Tokenizer& tok_;
  ApiRequest r_;
  std::string id_, model_;
  int64_t created_;
  int64_t prompt_len_ = 0;
  bool reasoning_ = false, thinking_ = true, tools_ = false;
};

void apply_length_limits(ApiRequest& r, int64_t prompt_len, int64_t max_model_len) {
  if (prompt_len >= max_model_len)
    throw ApiError(400, "This model's maximum context length is " + std::to_string(max_model_len) +
                            " tokens. However, your request has " + std::to_string(prompt_len) +
                            " input tokens. Please reduce the length of the input messages.", "messages");
  if (r.max_tokens_given && prompt_len + r.params.max_tokens > max_model_len)
    throw ApiError(400, "This model's maximum context length is " + std::to_string(max_model_len) +
                            " tokens. However, you requested " + std::to_string(prompt_len + r.params.max_tokens) +
                            " tokens (" + std::to_string(prompt_len) + " in the messages, " +
                            std::to_string(r.params.max_tokens) +
                            " in the completion). Please reduce the length of the messages or completion.",
                   "max_tokens");
  if (!r.max_tokens_given) r.params.max_tokens = max_model_len - prompt_len;
}

}  // namespace

OpenAiServing::OpenAiServing(AsyncEngine& engine, const Tokenizer& tokenizer, ServingConfig config)
    : engine_(engine), tokenizer_(tokenizer), config_(std::move(config)) {}

std::string OpenAiServing::next_id(const char* prefix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx%04llx", prefix, (unsigned long long)unix_now() * 2654435761ull,
                (unsigned long long)(counter_++ & 0xffff));
  return buf;
}

ojson OpenAiServing::models() const {
  ojson data = ojson::array();
  for (const auto& name : config_.served_model_names)
    data.push_back({{"id", name}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "kimi.cpp"},
                    {"root", config_.served_model_names[0]}, {"parent", nullptr},
                    {"max_model_len", engine_.max_model_len()}});
  return {{"object", "list"}, {"data", data}};
}

void OpenAiServing::check_model(const std::string& model) const {
  if (model.empty()) return;  // vLLM serves the only model when none is named
  for (const auto& n : config_.served_model_names)
    if (n == model) return;
  throw ApiError(404, "The model `" + model + "` does not exist.", "model");
}

void OpenAiServing::check_capacity() const {
  if (engine_.num_waiting() >= config_.max_waiting)
    throw ApiError(429, "Too many requests are waiting (--max-waiting " + std::to_string(config_.max_waiting) +
                            "); retry later.");
}

std::unique_ptr<ResponseJob> OpenAiServing::start_completion(const ojson& body) {
  ApiRequest r = parse_completion_request(body);
  check_model(r.model);
  check_capacity();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : r.prompts) {
    std::vector<int32_t> ids = p.text ? tokenizer_.encode(*p.text) : p.ids;
    if (ids.empty()) throw ApiError(400, "the prompt is empty", "prompt");
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer_.vocab_size())
        throw ApiError(400, "prompt token id " + std::to_string(id) + " is out of range", "prompt");
    prompts.push_back(std::move(ids));
  }
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, int64_t(p.size()));
  apply_length_limits(r, longest, engine_.max_model_len());
  const std::string model = r.model.empty() ? config_.served_model_names[0] : r.model;
  std::string id = r.request_id.empty() ? next_id("cmpl") : r.request_id;
  auto job = std::make_unique<CompletionJob>(engine_, tokenizer_, std::move(r), std::move(id), model);
  try {
    job->submit(std::move(prompts));
  } catch (const ApiError&) {
    throw;
  } catch (const EngineShuttingDown&) {
    throw;  // the HTTP layer answers 503
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  return job;
}

std::string OpenAiServing::render_chat(const ApiRequest& r) const {
  if (config_.chat_template.empty())
    throw ApiError(400, "this model has no chat template; use /v1/completions or start the server with --chat-template");
  ojson kwargs = r.chat_template_kwargs;
  const ojson tools = r.tool_choice == "none" ? ojson() : r.tools;
  try {
    return render_chat_template(config_.chat_template, r.messages, tools, r.add_generation_prompt, kwargs,
                                tokenizer_.bos_id() >= 0 ? token_text(tokenizer_, tokenizer_.bos_id()) : "",
                                tokenizer_.eos_id() >= 0 ? token_text(tokenizer_, tokenizer_.eos_id()) : "");
  } catch (const Error& e) {
    throw ApiError(400, std::string("chat template: ") + e.what(), "messages");
  }
}

std::unique_ptr<ResponseJob> OpenAiServing::start_chat(const ojson& body) {
  ApiRequest r = parse_chat_request(body);
  check_model(r.model);
  check_capacity();
  std::vector<int32_t> prompt = tokenizer_.encode(render_chat(r));
  apply_length_limits(r, int64_t(prompt.size()), engine_.max_model_len());
  // The parsers read the markers (<think>, <|tool_call_begin|>...), which are special tokens.
  const bool tools_active = config_.tool_parser && !r.tools.is_null() && r.tool_choice != "none";
  if (config_.reasoning_parser || tools_active) r.params.skip_special_tokens = false;
  const std::string model = r.model.empty() ? config_.served_model_names[0] : r.model;
  std::string id = r.request_id.empty() ? next_id("chatcmpl") : r.request_id;
  auto job = std::make_unique<ChatJob>(engine_, tokenizer_, std::move(r), std::move(id), model,
                                       config_.reasoning_parser, config_.tool_parser);
  try {
    job->submit(std::move(prompt));
  } catch (const ApiError&) {
    throw;
  } catch (const EngineShuttingDown&) {
    throw;  // the HTTP layer answers 503
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  return job;
}

ojson OpenAiServing::tokenize(const ojson& body) const {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    ApiRequest r = parse_chat_request(body);
    ids = tokenizer_.encode(render_chat(r));
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    ids = tokenizer_.encode(body["prompt"].get<std::string>());
  } else {
    throw ApiError(400, "/tokenize needs 'prompt' (a string) or 'messages'", "prompt");
  }
  return {{"count", ids.size()}, {"max_model_len", engine_.max_model_len()}, {"tokens", ids}};
}

ojson OpenAiServing::detokenize(const ojson& body) const {
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
    throw ApiError(400, "/detokenize needs 'tokens' (a list of token ids)", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer_.vocab_size())
      throw ApiError(400, "'tokens' must hold token ids in 0.." + std::to_string(tokenizer_.vocab_size() - 1), "tokens");
    ids.push_back(t.get<int32_t>());
  }
  return {{"prompt", tokenizer_.decode(ids)}};
}

}  // namespace kimi
