#include "server/serving.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <chrono>

#include "server/api_error.h"
#include "server/kv_transfer_json.h"
#include "server/parsers/marker_scan.h"
#include "server/parsers/reasoning_parser.h"
#include "server/parsers/tool_parser.h"
#include "server/tool_call_ids.h"
#include "server/tool_choice.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/utf8.h"

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

// The reasoning parser's markers. With skip_special_tokens they are the only specials the engine
// writes into the text (SamplingParams::visible_special_ids), and are taken out again after
// parsing, so that the client sees no special token, as it asked.
constexpr std::string_view kParserMarkers[] = {"<think>", "</think>", "<|tool_calls_section_begin|>"};

// Removes the parser markers from a stream of text, holding back a possible partial marker at
// the end of each piece, so that any split of the text gives the same result.
class MarkerStripper {
 public:
  std::string push(std::string_view piece) {
    held_.append(piece);
    std::string out;
    size_t i = 0;
    while (i < held_.size()) {
      bool matched = false;
      for (std::string_view m : kParserMarkers)
        if (std::string_view(held_).substr(i).starts_with(m)) {
          i += m.size();
          matched = true;
          break;
        }
      if (matched) continue;
      // A '<' that may still become a marker once more text arrives is held.
      if (held_[i] == '<' && parser_detail::partial_marker_len(std::string_view(held_).substr(i),
                                                               {kParserMarkers[0], kParserMarkers[1], kParserMarkers[2]}) ==
                                 held_.size() - i)
        break;
      out.push_back(held_[i++]);
    }
    held_.erase(0, i);
    return out;
  }
  std::string finish() { return std::exchange(held_, {}); }
  static std::string strip(std::string_view text) {
    MarkerStripper s;
    return s.push(text) + s.finish();
  }

 private:
  std::string held_;
};

// Python truthiness of a template argument (how the chat template reads `thinking: 0`).
bool truthy(const ojson& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();  // json::empty() is false for strings
  if (v.is_array() || v.is_object()) return !v.empty();
  return false;
}

// Whether the chat template renders thinking on: `thinking`, else `enable_thinking`, when given
// and not null; on by default (the Kimi template's rule).
bool thinking_enabled(const ojson& kwargs) {
  for (const char* k : {"thinking", "enable_thinking"}) {
    auto it = kwargs.find(k);
    if (it != kwargs.end() && !it->is_null()) return truthy(*it);
  }
  return true;
}

// Character offsets of consecutive tokens in the text they make up (OpenAI's text_offset): each
// token starts at the number of whole characters before it (Python's len of the text so far),
// counting invalid bytes as U+FFFD as the decoder does; tokens not shown in the text (skipped
// specials) add nothing.
class TextOffsets {
 public:
  explicit TextOffsets(int64_t start = 0) : chars_(start) {}
  int64_t next(std::string_view token, bool shown) {
    const int64_t at = chars_;
    if (!shown) return at;
    pending_.append(token);
    size_t i = 0;
    while (i < pending_.size()) {
      const utf8::Decoded d = utf8::decode_one(pending_, i);
      if (d.status == utf8::Status::Incomplete) break;
      ++chars_;
      i += d.len;
    }
    pending_.erase(0, i);
    return at;
  }

 private:
  int64_t chars_;
  std::string pending_;
};

// vLLM's prompt_logprobs: null for the first prompt token, then per token a map from token id to
// {logprob, rank, decoded_token} holding the prompt's token and the top-k. `lps[i]` is the
// engine's entry for prompt token i + 1: the actual token first, then the top-k, most likely
// first. The actual token's rank is known when it is among the top-k; otherwise it is null.
ojson prompt_logprobs_json(const Tokenizer& t, const std::vector<std::vector<TokenLogprob>>& lps) {
  ojson out = ojson::array();
  out.push_back(nullptr);
  for (const auto& pos : lps) {
    ojson d = ojson::object();
    if (pos.empty()) {
      out.push_back(d);
      continue;
    }
    const TokenLogprob actual = pos[0];
    ojson rank = nullptr;
    for (size_t k = 1; k < pos.size(); ++k)
      if (pos[k].token == actual.token) rank = k;
    auto entry = [&](const TokenLogprob& e, ojson r) {
      return ojson{{"logprob", e.logprob}, {"rank", std::move(r)}, {"decoded_token", std::string(t.token_bytes(e.token))}};
    };
    d[std::to_string(actual.token)] = entry(actual, rank);
    for (size_t k = 1; k < pos.size(); ++k)
      if (pos[k].token != actual.token) d[std::to_string(pos[k].token)] = entry(pos[k], k);
    out.push_back(d);
  }
  return out;
}

// Per-choice accumulation of engine outputs.
struct ChoiceState {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<SampleResult> logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_logprobs;
  FinishReason finish = FinishReason::None;
  std::string stop_reason;
  int32_t stop_token = -1;
  bool finished = false;
  std::optional<KvTransferParams> kv_transfer_params;  // a prefill holding its KV for a decoder
};

// Reads every output of a request into per-choice states; throws on an engine error.
void drain(RequestStream& s, std::vector<ChoiceState>& choices, size_t offset, int64_t& completion_tokens,
           int64_t& cached) {
  while (auto o = s.next()) {
    if (!o->error.empty()) throw ApiError(o->error_status, o->error);
    ChoiceState& c = choices[offset + size_t(o->index)];
    c.text += o->text;
    c.tokens.insert(c.tokens.end(), o->token_ids.begin(), o->token_ids.end());
    for (auto& lp : o->logprobs) c.logprobs.push_back(std::move(lp));
    if (!o->prompt_logprobs.empty()) c.prompt_logprobs = std::move(o->prompt_logprobs);
    if (o->finished) {
      c.finished = true;
      c.finish = o->finish_reason;
      c.stop_reason = o->stop_reason;
      c.stop_token = o->stop_token;
      c.kv_transfer_params = o->kv_transfer_params;
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
      : reqs_(e), tok_(t), r_(std::move(r)), id_(std::move(id)), model_(std::move(model)), created_(unix_now()) {
    // What the client asked for, before echo widens the engine's request below.
    return_prompt_logprobs_ = r_.params.prompt_logprobs.has_value();
    // Echo with logprobs covers the prompt tokens too (OpenAI's legacy completions), so the
    // engine computes prompt logprobs with at least as many alternatives.
    if (r_.echo && r_.params.logprobs)
      r_.params.prompt_logprobs = std::max(r_.params.prompt_logprobs.value_or(0), *r_.params.logprobs);
  }

  void submit(std::vector<std::vector<int32_t>> prompts) {
    prompt_ids_ = std::move(prompts);
    for (size_t i = 0; i < prompt_ids_.size(); ++i) {
      const std::string rid = id_ + "-" + std::to_string(i);
      reqs_.add(rid, reqs_.engine().add_request(rid, prompt_ids_[i], r_.params, r_.priority, r_.data_parallel_rank));
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
      ojson lps = nullptr;
      if (r_.params.logprobs) {
        LogprobsBuilder b;
        if (r_.echo) add_prompt(b, prompt_ids_[p], choices[k].prompt_logprobs);
        add_generated(b, choices[k].logprobs);
        lps = b.json();
      }
      if (r_.echo) text = tok_.decode(prompt_ids_[p]) + text;
      ojson c = {{"index", k}, {"text", text}, {"logprobs", lps},
                 {"finish_reason", finish_json(choices[k].finish)}, {"stop_reason", stop_reason_json(choices[k])}};
      if (return_prompt_logprobs_) c["prompt_logprobs"] = prompt_logprobs_json(tok_, choices[k].prompt_logprobs);
      arr.push_back(c);
    }
    out["choices"] = arr;
    out["usage"] = usage_json(prompt, completion, cached);
    if (!choices.empty() && choices[0].kv_transfer_params) out["kv_transfer_params"] = kv_transfer_params_json(*choices[0].kv_transfer_params);
    return out;
  }

  void stream(EventWriter& w) override {
    const size_t n = size_t(r_.params.n);
    int64_t completion = 0, prompt = 0, cached = 0;
    // Per choice: the logprobs' running text offsets, and whether the prompt was echoed yet. The
    // echo waits for the choice's first output, which carries the prompt logprobs.
    std::vector<LogprobsBuilder> builders(prompt_ids_.size() * n);
    std::vector<bool> echoed(prompt_ids_.size() * n, false);
    for (size_t i = 0; i < prompt_ids_.size(); ++i) {
      prompt += int64_t(prompt_ids_[i].size());
      while (auto o = reqs_.streams()[i]->next()) {
        if (!o->error.empty()) {
          w.write(sse(error_body(o->error_status, o->error)));
          return;
        }
        const size_t k = i * n + size_t(o->index);
        LogprobsBuilder& b = builders[k];
        if (r_.echo && !echoed[k]) {
          echoed[k] = true;
          ojson lps = nullptr;
          if (r_.params.logprobs) {
            add_prompt(b, prompt_ids_[i], o->prompt_logprobs);
            lps = b.take_json();
          }
          if (!w.write(sse(chunk(k, tok_.decode(prompt_ids_[i]), lps, nullptr)))) return;
        }
        ojson lps = nullptr;
        if (r_.params.logprobs) {
          add_generated(b, o->logprobs);
          lps = b.take_json();
        }
        ojson c = chunk(k, o->text, lps, o->finished ? finish_json(o->finish_reason) : ojson());
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
  // OpenAI's legacy logprobs object, built token by token; the text offsets run on across
  // take_json() calls (one per streamed chunk).
  struct LogprobsBuilder {
    ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
    TextOffsets text;
    ojson json() const {
      return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
    }
    ojson take_json() {
      ojson j = json();
      tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
      return j;
    }
  };
  // The prompt tokens (echo): the first has no logprob (null, as OpenAI and vLLM give it).
  void add_prompt(LogprobsBuilder& b, const std::vector<int32_t>& prompt,
                  const std::vector<std::vector<TokenLogprob>>& lps) const {
    const size_t k = size_t(*r_.params.logprobs);
    for (size_t i = 0; i < prompt.size(); ++i) {
      const std::string s = token_text(tok_, prompt[i]);
      b.tokens.push_back(s);
      b.offsets.push_back(b.text.next(s, true));  // the echo is decoded with every special shown
      if (i == 0 || i - 1 >= lps.size() || lps[i - 1].empty()) {
        b.token_lps.push_back(nullptr);
        b.tops.push_back(nullptr);
        continue;
      }
      const auto& pos = lps[i - 1];  // the actual token, then the top alternatives
      b.token_lps.push_back(pos[0].logprob);
      ojson top = ojson::object();
      for (size_t j = 1; j < pos.size() && j <= k; ++j) top[token_text(tok_, pos[j].token)] = pos[j].logprob;
      top[s] = pos[0].logprob;
      b.tops.push_back(top);
    }
  }
  void add_generated(LogprobsBuilder& b, const std::vector<SampleResult>& lps) const {
    for (const auto& s : lps) {
      const std::string t = token_text(tok_, s.token);
      b.tokens.push_back(t);
      b.token_lps.push_back(s.logprob);
      b.offsets.push_back(b.text.next(t, shown(s.token)));
      ojson top = ojson::object();
      for (const auto& e : s.top) top[token_text(tok_, e.token)] = e.logprob;
      b.tops.push_back(top);
    }
  }
  // Whether a generated token's text is in the returned text.
  bool shown(int32_t id) const {
    const auto& p = r_.params;
    return !p.skip_special_tokens || !tok_.is_special(id) ||
           std::find(p.visible_special_ids.begin(), p.visible_special_ids.end(), id) != p.visible_special_ids.end();
  }
  ojson chunk(size_t index, const std::string& text, ojson lps, ojson finish) const {
    ojson c = {{"index", index}, {"text", text}, {"logprobs", std::move(lps)}, {"finish_reason", finish}};
    return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}, {"choices", {c}}};
  }

  EngineRequests reqs_;
  const Tokenizer& tok_;
  ApiRequest r_;
  std::string id_, model_;
  int64_t created_;
  std::vector<std::vector<int32_t>> prompt_ids_;
  bool return_prompt_logprobs_ = false;
};

// ---------------------------------------------------------------------------------------------
class ChatJob : public ResponseJob {
 public:
  ChatJob(AsyncEngine& e, const Tokenizer& t, ApiRequest r, std::string id, std::string model, bool reasoning,
          bool tools)
      : reqs_(e), tok_(t), r_(std::move(r)), id_(std::move(id)), model_(std::move(model)), created_(unix_now()) {
    reasoning_ = reasoning;
    // The template renders thinking on or off by Python truthiness; a continued final message
    // is answer text (the template closes its <think></think> before it).
    thinking_ = thinking_enabled(r_.chat_template_kwargs) && !r_.continue_final_message;
    tools_ = tools && !r_.tools.is_null() && r_.tool_choice != "none";
    first_call_ = count_history_tool_calls(r_.messages);
    strip_markers_ = !r_.params.visible_special_ids.empty();
  }

  void submit(std::vector<int32_t> prompt) {
    prompt_len_ = int64_t(prompt.size());
    reqs_.add(id_, reqs_.engine().add_request(id_, std::move(prompt), r_.params, r_.priority, r_.data_parallel_rank));
  }
  bool streaming() const override { return r_.stream; }
  void cancel() override { reqs_.abort(); }
  int64_t prompt_tokens() const override { return prompt_len_; }

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
        if (rr.reasoning) reasoning = strip_markers_ ? MarkerStripper::strip(*rr.reasoning) : *rr.reasoning;
        content = strip_markers_ ? MarkerStripper::strip(rr.content) : rr.content;
      }
      ojson tool_calls = ojson::array();
      bool called = false;
      if (tools_) {
        const auto tr = KimiK2ToolParser().extract(content);
        // Canonical ids whatever the model wrote (tool_call_ids.h).
        for (size_t k = 0; k < tr.calls.size(); ++k) {
          const auto& call = tr.calls[k];
          tool_calls.push_back({{"id", canonical_tool_call_id(call.name, first_call_ + int64_t(k))}, {"type", "function"},
                                {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
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
    ojson out = {{"id", id_}, {"object", "chat.completion"}, {"created", created_}, {"model", model_},
                 {"choices", arr}, {"usage", usage_json(prompt_len_, completion, cached)}};
    if (choices[0].kv_transfer_params) out["kv_transfer_params"] = kv_transfer_params_json(*choices[0].kv_transfer_params);
    // vLLM gives the (shared) prompt's logprobs once, beside the choices.
    if (r_.params.prompt_logprobs) out["prompt_logprobs"] = prompt_logprobs_json(tok_, choices[0].prompt_logprobs);
    return out;
  }

  void stream(EventWriter& w) override {
    const size_t n = size_t(r_.params.n);
    std::vector<std::unique_ptr<KimiK2ReasoningParser>> rp(n);
    std::vector<std::unique_ptr<KimiK2ToolParser>> tp(n);
    std::vector<MarkerStripper> strip_reasoning(n), strip_content(n);
    for (size_t i = 0; i < n; ++i) {
      if (reasoning_) rp[i] = std::make_unique<KimiK2ReasoningParser>(thinking_);
      if (tools_) tp[i] = std::make_unique<KimiK2ToolParser>();
      if (!w.write(sse(chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr)))) return;
    }
    int64_t completion = 0, cached = 0;
    while (auto o = reqs_.streams()[0]->next()) {
      if (!o->error.empty()) {
        w.write(sse(error_body(o->error_status, o->error)));
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
      if (rp[i] && strip_markers_) {
        reasoning = strip_reasoning[i].push(reasoning);
        content = strip_content[i].push(content);
        if (o->finished) reasoning += strip_reasoning[i].finish(), content += strip_content[i].finish();
      }
      ojson calls = ojson::array();
      if (tp[i]) {
        auto add = [&](KimiK2ToolParser::StreamDelta d) {
          for (const auto& c : d.tool_calls) {
            ojson fn = {{"arguments", c.arguments}};
            if (c.name) fn["name"] = *c.name;
            ojson call = {{"index", c.index}, {"function", fn}};
            if (c.id) call["id"] = canonical_tool_call_id(c.name.value_or(""), first_call_ + c.index), call["type"] = "function";
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
      // As vLLM's stream choice: the stop string (or token id) that ended it.
      if (o->finished) {
        ChoiceState ended;
        ended.stop_reason = o->stop_reason;
        ended.stop_token = o->stop_token;
        c["choices"][0]["stop_reason"] = stop_reason_json(ended);
      }
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
  bool strip_markers_ = false;  // the parser markers were made visible only for the parser
  int64_t first_call_ = 0;      // the IDX of this answer's first tool call
};

// continue_final_message: the rendered prompt ends right after the final message's text, without
// its end-of-turn, so that the model continues it (Hugging Face's apply_chat_template rule: the
// last place the stripped text occurs, keeping its trailing whitespace when the template did).
void cut_after_final_message(std::string& prompt, const ojson& message) {
  std::string text;
  const ojson* content = message.contains("content") ? &message["content"] : nullptr;
  if (content && content->is_string()) {
    text = content->get<std::string>();
  } else if (content && content->is_array()) {
    for (auto it = content->rbegin(); it != content->rend(); ++it)
      if (it->contains("text") && (*it)["text"].is_string()) {
        text = (*it)["text"].get<std::string>();
        break;
      }
  }
  auto is_space = [](char c) { return parser_detail::is_space(c); };
  size_t b = 0, e = text.size();
  while (b < e && is_space(text[b])) ++b;
  while (e > b && is_space(text[e - 1])) --e;
  const std::string stripped = text.substr(b, e - b), lstripped = text.substr(b);
  if (stripped.empty())
    throw ApiError(400, "'continue_final_message' needs a final message with text to continue", "messages");
  const size_t at = prompt.rfind(stripped);
  if (at == std::string::npos)
    throw ApiError(400, "'continue_final_message': the final message does not appear in the rendered chat",
                   "messages");
  prompt.resize(at + (prompt.compare(at, lstripped.size(), lstripped) == 0 ? lstripped.size() : stripped.size()));
}

void apply_length_limits(ApiRequest& r, int64_t prompt_len, int64_t max_model_len) {
  if (prompt_len >= max_model_len)
    throw ApiError(400, "This model's maximum context length is " + std::to_string(max_model_len) +
                            " tokens. However, your request has " + std::to_string(prompt_len) +
                            " input tokens. Please reduce the length of the input messages.", "messages");
  // Compared without adding: max_tokens may be as large as INT64_MAX. Both are non-negative
  // int64, so their sum fits in uint64 for the message.
  if (r.max_tokens_given && r.params.max_tokens > max_model_len - prompt_len)
    throw ApiError(400, "This model's maximum context length is " + std::to_string(max_model_len) +
                            " tokens. However, you requested " +
                            std::to_string(uint64_t(prompt_len) + uint64_t(r.params.max_tokens)) +
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

std::unique_ptr<ResponseJob> OpenAiServing::start_completion(const ojson& body, std::optional<int> data_parallel_rank) {
  ApiRequest r = parse_completion_request(body);
  r.data_parallel_rank = data_parallel_rank;
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
  } catch (const ParamError& e) {
    throw ApiError(400, e.what(), e.param());
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  return job;
}

std::string OpenAiServing::render_chat(const ApiRequest& r) const {
  if (config_.chat_template.empty())
    throw ApiError(400, "this model has no chat template; use /v1/completions or start the server with --chat-template");
  ojson kwargs = r.chat_template_kwargs;
  // vLLM keeps the tools in the prompt with tool_choice "none" (the model still sees them, it
  // is only not parsed for calls) unless --exclude-tools-when-tool-choice-none.
  const bool exclude = r.tool_choice == "none" && config_.exclude_tools_when_tool_choice_none;
  const ojson tools = exclude ? ojson() : r.tools;
  std::string prompt;
  try {
    // The history's call ids in Kimi's canonical form (tool_call_ids.h).
    prompt = render_chat_template(config_.chat_template, canonicalize_tool_call_ids(r.messages), tools, r.add_generation_prompt, kwargs,
                                  tokenizer_.bos_id() >= 0 ? token_text(tokenizer_, tokenizer_.bos_id()) : "",
                                  tokenizer_.eos_id() >= 0 ? token_text(tokenizer_, tokenizer_.eos_id()) : "");
  } catch (const Error& e) {
    throw ApiError(400, std::string("chat template: ") + e.what(), "messages");
  }
  if (r.continue_final_message) cut_after_final_message(prompt, r.messages.back());
  return prompt;
}

std::unique_ptr<ResponseJob> OpenAiServing::start_chat(const ojson& body, std::optional<int> data_parallel_rank) {
  ApiRequest r = parse_chat_request(body);
  r.data_parallel_rank = data_parallel_rank;
  check_model(r.model);
  check_capacity();
  std::vector<int32_t> prompt = tokenizer_.encode(render_chat(r));
  apply_length_limits(r, int64_t(prompt.size()), engine_.max_model_len());
  // The parsers read markers (<think>, <|tool_call_begin|>...) that are special tokens. The tool
  // parser needs them all (vLLM's kimi_k2 tool parser turns skip_special_tokens off too); the
  // reasoning parser only its own, so just those stay visible and the client's
  // skip_special_tokens holds for the rest (vLLM finds reasoning by token id).
  const bool tools_active = config_.tool_parser && !r.tools.is_null() && r.tool_choice != "none";
  if (tools_active) {
    r.params.skip_special_tokens = false;
  } else if (config_.reasoning_parser && r.params.skip_special_tokens) {
    for (std::string_view m : kParserMarkers)
      if (auto id = tokenizer_.token_id(m)) r.params.visible_special_ids.push_back(*id);
  }
  // tool_choice required / named: the output is a tool-call section of the allowed tools; tool_choice
  // auto with strict tools: their arguments follow the schemas (when no other spec is given).
  if (tools_active) {
    structured::StructuredSpec calls = forced_tool_calls_spec(r, tokenizer_);
    if (calls.active() && r.params.structured.active() && r.tool_choice != "auto")
      throw ApiError(400, "tool_choice " + r.tool_choice + " cannot be combined with '" + r.params.structured.param + "'",
                     "tool_choice");
    if (calls.active() && !r.params.structured.active()) r.params.structured = std::move(calls);
  }
  // With a reasoning model thinking, the structured output is the answer: it starts after </think>.
  if (r.params.structured.active() && config_.reasoning_parser && thinking_enabled(r.chat_template_kwargs) &&
      !r.continue_final_message)
    if (auto end = tokenizer_.token_id("</think>")) r.params.structured.start_after_token = *end;
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
  } catch (const ParamError& e) {
    throw ApiError(400, e.what(), e.param());
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
