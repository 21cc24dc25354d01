#include "engine/step_codec.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "common/error.h"

namespace kimi {

namespace {

class Writer {
 public:
  std::vector<std::byte> out;
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    pod(uint64_t(v.size()));
    for (const T& x : v) pod(x);
  }
  void str(const std::string& s) {
    pod(uint64_t(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), p, p + s.size());
  }
  template <class T>
  void opt(const std::optional<T>& v) {
    pod(uint8_t(v.has_value()));
    if (v) pod(*v);
  }
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  template <class T>
  T pod() {
    T v;
    take(&v, sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> vec() {
    const uint64_t n = count(sizeof(T));
    std::vector<T> v(static_cast<size_t>(n));
    if (n) take(v.data(), size_t(n) * sizeof(T));
    return v;
  }
  std::string str() {
    const uint64_t n = count(1);
    std::string s(size_t(n), '\0');
    if (n) take(s.data(), size_t(n));
    return s;
  }
  template <class T>
  std::optional<T> opt() {
    if (!pod<uint8_t>()) return std::nullopt;
    return pod<T>();
  }
  bool done() const { return at_ == b_.size(); }

 private:
  uint64_t count(size_t elem) {
    const uint64_t n = pod<uint64_t>();
    if (n > (b_.size() - at_) / elem) throw Error("step message: a length runs past its end");
    return n;
  }
  void take(void* dst, size_t n) {
    if (n > b_.size() - at_) throw Error("step message: truncated");
    std::memcpy(dst, b_.data() + at_, n);
    at_ += n;
  }
  std::span<const std::byte> b_;
  size_t at_ = 0;
};

}  // namespace

std::vector<std::byte> encode_step(const SchedulerOutput& so) {
  Writer w;
  w.pod(uint64_t(so.new_requests.size()));
  for (const NewRequestData& n : so.new_requests) {
    w.str(n.request_id);
    w.vec(n.prompt_token_ids);
    w.pod(n.seed);
    const SamplingParams& p = n.sampling_params;
    w.pod(p.n);
    w.pod(p.temperature);
    w.pod(p.top_p);
    w.pod(p.top_k);
    w.pod(p.min_p);
    w.opt(p.seed);
    w.pod(p.presence_penalty);
    w.pod(p.frequency_penalty);
    w.pod(p.repetition_penalty);
    w.pod(p.max_tokens);
    w.pod(p.min_tokens);
    w.vec(p.stop_token_ids);
    w.pod(uint8_t(p.ignore_eos));
    w.opt(p.logprobs);
    w.opt(p.prompt_logprobs);
    w.pod(uint64_t(p.logit_bias.size()));
    for (const auto& [token, bias] : p.logit_bias) {
      w.pod(token);
      w.pod(bias);
    }
  }
  w.pod(uint64_t(so.scheduled.size()));
  for (const ScheduledRequest& s : so.scheduled) {
    w.str(s.request_id);
    w.pod(s.num_computed_tokens);
    w.vec(s.token_ids);
    w.vec(s.draft_token_ids);
    w.vec(s.embeddings.offsets);
    w.vec(s.embeddings.values);
    w.vec(s.block_ids);
    w.pod(uint8_t(s.sample));
  }
  w.pod(uint64_t(so.finished_request_ids.size()));
  for (const std::string& id : so.finished_request_ids) w.str(id);
  w.vec(so.capture_hidden_layers);
  w.pod(so.num_scheduled_tokens);
  return std::move(w.out);
}

SchedulerOutput decode_step(std::span<const std::byte> bytes) {
  Reader r(bytes);
  SchedulerOutput so;
  for (uint64_t i = 0, n = r.pod<uint64_t>(); i < n; ++i) {
    NewRequestData d;
    d.request_id = r.str();
    d.prompt_token_ids = r.vec<int32_t>();
    d.seed = r.pod<uint64_t>();
    SamplingParams& p = d.sampling_params;
    p.n = r.pod<int>();
    p.temperature = r.pod<float>();
    p.top_p = r.pod<float>();
    p.top_k = r.pod<int>();
    p.min_p = r.pod<float>();
    p.seed = r.opt<uint64_t>();
    p.presence_penalty = r.pod<float>();
    p.frequency_penalty = r.pod<float>();
    p.repetition_penalty = r.pod<float>();
    p.max_tokens = r.pod<int64_t>();
    p.min_tokens = r.pod<int64_t>();
    p.stop_token_ids = r.vec<int32_t>();
    p.ignore_eos = r.pod<uint8_t>() != 0;
    p.logprobs = r.opt<int>();
    p.prompt_logprobs = r.opt<int>();
    for (uint64_t b = 0, nb = r.pod<uint64_t>(); b < nb; ++b) {
      const int32_t token = r.pod<int32_t>();
      p.logit_bias.emplace_back(token, r.pod<float>());
    }
    so.new_requests.push_back(std::move(d));
  }
  for (uint64_t i = 0, n = r.pod<uint64_t>(); i < n; ++i) {
    ScheduledRequest s;
    s.request_id = r.str();
    s.num_computed_tokens = r.pod<int64_t>();
    s.token_ids = r.vec<int32_t>();
    s.draft_token_ids = r.vec<int32_t>();
    s.embeddings.offsets = r.vec<int64_t>();
    s.embeddings.values = r.vec<float>();
    s.block_ids = r.vec<int32_t>();
    s.sample = r.pod<uint8_t>() != 0;
    so.scheduled.push_back(std::move(s));
  }
  for (uint64_t i = 0, n = r.pod<uint64_t>(); i < n; ++i) so.finished_request_ids.push_back(r.str());
  so.capture_hidden_layers = r.vec<int64_t>();
  so.num_scheduled_tokens = r.pod<int64_t>();
  if (!r.done()) throw Error("step message: trailing bytes");
  return so;
}

std::vector<std::byte> encode_kv_config(const KvCacheConfig& kv) {
  Writer w;
  w.pod(kv.num_blocks);
  w.pod(kv.block_size);
  w.pod(uint8_t(kv.dtype));
  return std::move(w.out);
}

KvCacheConfig decode_kv_config(std::span<const std::byte> bytes) {
  Reader r(bytes);
  KvCacheConfig kv;
  kv.num_blocks = r.pod<int64_t>();
  kv.block_size = r.pod<int64_t>();
  kv.dtype = KvCacheDtype(r.pod<uint8_t>());
  if (!r.done()) throw Error("KV cache settings: trailing bytes");
  return kv;
}

std::vector<std::byte> encode_runner_output(const ModelRunnerOutput& out) {
  Writer w;
  w.pod(uint64_t(out.requests.size()));
  for (const RequestRunnerOutput& r : out.requests) {
    w.str(r.request_id);
    w.vec(r.sampled_token_ids);
    w.pod(uint64_t(r.logprobs.size()));
    for (const SampleResult& s : r.logprobs) {
      w.pod(s.token);
      w.pod(s.logprob);
      w.vec(s.top);
    }
    w.pod(uint64_t(r.prompt_logprobs.size()));
    for (const auto& p : r.prompt_logprobs) w.vec(p);
    w.vec(r.hidden_states);
    w.pod(r.num_accepted_drafts);
    w.vec(r.draft_token_ids);
  }
  return std::move(w.out);
}

ModelRunnerOutput decode_runner_output(std::span<const std::byte> bytes) {
  Reader r(bytes);
  ModelRunnerOutput out;
  // Each element takes at least 8 bytes, so a count is checked against what is left before any
  // allocation (a corrupt count must not reserve gigabytes).
  const auto count = [&](const char* what) {
    const uint64_t n = r.pod<uint64_t>();
    if (n > bytes.size() / 8) throw Error(std::string("runner output: bad ") + what + " count");
    return n;
  };
  for (uint64_t i = 0, n = count("request"); i < n; ++i) {
    RequestRunnerOutput o;
    o.request_id = r.str();
    o.sampled_token_ids = r.vec<int32_t>();
    for (uint64_t k = 0, nk = count("logprob"); k < nk; ++k) {
      SampleResult s;
      s.token = r.pod<int32_t>();
      s.logprob = r.pod<float>();
      s.top = r.vec<TokenLogprob>();
      o.logprobs.push_back(std::move(s));
    }
    for (uint64_t k = 0, nk = count("prompt logprob"); k < nk; ++k) o.prompt_logprobs.push_back(r.vec<TokenLogprob>());
    o.hidden_states = r.vec<float>();
    o.num_accepted_drafts = r.pod<int64_t>();
    o.draft_token_ids = r.vec<int32_t>();
    out.requests.push_back(std::move(o));
  }
  if (!r.done()) throw Error("runner output: trailing bytes");
  return out;
}

}  // namespace kimi
