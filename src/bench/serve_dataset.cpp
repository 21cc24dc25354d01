#include "bench/serve_dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace kimi {

namespace {

using json = nlohmann::json;

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return lo + std::min<int64_t>(hi - lo, int64_t(rng.uniform() * double(hi - lo + 1)));
}

class LocalCodec final : public TokenCodec {
 public:
  explicit LocalCodec(const std::filesystem::path& dir) : tok_(Tokenizer::load(dir)), name_(dir.string()) {}
  std::vector<int32_t> encode(const std::string& text) const override { return tok_.encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return utf8::replace_invalid(tok_.decode(ids)); }
  int32_t ordinary_vocab_size() const override { return tok_.num_base_tokens(); }
  std::string name() const override { return name_; }

 private:
  Tokenizer tok_;
  std::string name_;
};

class ServerCodec final : public TokenCodec {
 public:
  ServerCodec(const ServeClientConfig& c, int32_t vocab) : c_(c), vocab_(vocab) {
    if (vocab_ <= 0) vocab_ = probe_vocab();
  }
  std::vector<int32_t> encode(const std::string& text) const override {
    const json r = http_post_json(c_, "/tokenize", {{"model", c_.model}, {"prompt", text}, {"content", text}, {"add_special_tokens", false}});
    if (!r.contains("tokens") || !r["tokens"].is_array()) throw Error(c_.base_url + "/tokenize: no 'tokens' in the response");
    std::vector<int32_t> ids;
    for (const auto& t : r["tokens"]) {
      if (!t.is_number_integer()) throw Error(c_.base_url + "/tokenize: 'tokens' holds a non-integer");
      ids.push_back(t.get<int32_t>());
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    const json r = http_post_json(c_, "/detokenize", {{"model", c_.model}, {"tokens", ids}});
    for (const char* key : {"prompt", "content"})
      if (r.contains(key) && r[key].is_string()) return utf8::replace_invalid(r[key].get<std::string>());
    throw Error(c_.base_url + "/detokenize: no 'prompt' in the response");
  }
  int32_t ordinary_vocab_size() const override { return vocab_; }
  std::string name() const override { return c_.base_url + "/tokenize"; }

 private:
  bool valid(int32_t id) const {
    try {
      decode({id});
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  // Servers reject ids past the vocabulary; the first rejected id is its size. The special
  // tokens at its end are then drawn too, which --tokenizer DIR avoids.
  int32_t probe_vocab() const {
    if (!valid(0)) throw Error(c_.base_url + "/detokenize rejects token id 0: pass --tokenizer MODEL_DIR");
    int32_t lo = 0, hi = 1 << 24;  // lo valid, hi invalid
    if (valid(hi)) throw Error(c_.base_url + "/detokenize accepts any id: pass --tokenizer MODEL_DIR or --random-vocab-size N");
    while (hi - lo > 1) {
      const int32_t mid = lo + (hi - lo) / 2;
      (valid(mid) ? lo : hi) = mid;
    }
    return hi;
  }

  ServeClientConfig c_;
  int32_t vocab_;
};

std::string text_of(const json& j) { return j.is_string() ? j.get<std::string>() : std::string(); }

}  // namespace

std::unique_ptr<TokenCodec> make_local_codec(const std::filesystem::path& model_dir) {
  return std::make_unique<LocalCodec>(model_dir);
}

std::unique_ptr<TokenCodec> make_server_codec(const ServeClientConfig& config, int32_t vocab_size) {
  return std::make_unique<ServerCodec>(config, vocab_size);
}

RandomLengths sample_random_lengths(size_t n, const RandomDatasetOptions& o, int32_t vocab, Rng& rng) {
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) throw Error("--random-range-ratio must be in [0, 1)");
  if (o.input_len < 0 || o.output_len < 0 || o.prefix_len < 0) throw Error("random dataset lengths must not be negative");
  if (vocab <= 0) throw Error("the tokenizer has no ordinary tokens");
  RandomLengths r;
  r.input_low = int64_t(std::floor(double(o.input_len) * (1.0 - o.range_ratio)));
  r.input_high = int64_t(std::ceil(double(o.input_len) * (1.0 + o.range_ratio)));
  r.output_low = std::max<int64_t>(1, int64_t(std::floor(double(o.output_len) * (1.0 - o.range_ratio))));
  r.output_high = std::max<int64_t>(1, int64_t(std::ceil(double(o.output_len) * (1.0 + o.range_ratio))));
  if (o.prefix_len + r.input_low < 1)
    throw Error("--random-input-len is too small: the shortest prompt (prefix + input) would have no tokens");
  for (size_t i = 0; i < n; ++i) r.input.push_back(uniform_int(rng, r.input_low, r.input_high));
  for (size_t i = 0; i < n; ++i) r.output.push_back(uniform_int(rng, r.output_low, r.output_high));
  for (size_t i = 0; i < n; ++i) r.offsets.push_back(uniform_int(rng, 0, vocab - 1));
  return r;
}

std::vector<ServeRequest> make_random_dataset(const TokenCodec& codec, size_t n, const RandomDatasetOptions& o) {
  const int32_t vocab = codec.ordinary_vocab_size();
  Rng rng(o.seed);
  const RandomLengths lens = sample_random_lengths(n, o, vocab, rng);
  std::vector<int32_t> prefix;
  for (int64_t i = 0; i < o.prefix_len; ++i) prefix.push_back(int32_t(uniform_int(rng, 0, vocab - 1)));
  std::vector<ServeRequest> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> ids = prefix;
    for (int64_t k = 0; k < lens.input[i]; ++k) ids.push_back(int32_t((lens.offsets[i] + int64_t(i) + k) % vocab));
    const size_t target = size_t(o.prefix_len + lens.input[i]);
    // Decoding and re-encoding merges or splits tokens at the seams; pad or cut until the
    // text re-encodes to the target length.
    std::string prompt = codec.decode(ids);
    std::vector<int32_t> again = codec.encode(prompt);
    for (int round = 0; round < 10 && again.size() != target; ++round) {
      ids = again;
      if (ids.size() > target) ids.resize(target);
      while (ids.size() < target) ids.push_back(int32_t(uniform_int(rng, 0, vocab - 1)));
      prompt = codec.decode(ids);
      again = codec.encode(prompt);
    }
    out.push_back({prompt, int64_t(again.size()), lens.output[i]});
  }
  return out;
}

std::vector<ServeRequest> load_file_dataset(const std::filesystem::path& path, size_t n, const FileDatasetOptions& o,
                                            const TokenCodec* codec) {
  std::ifstream in(path);
  if (!in) throw Error("--dataset-path: cannot read '" + path.string() + "'");
  std::vector<ServeRequest> pool;
  if (o.format == "sharegpt") {
    if (!codec) throw Error("the sharegpt dataset needs a tokenizer (--tokenizer DIR or a server with /tokenize)");
    const json all = json::parse(in, nullptr, false);
    if (!all.is_array()) throw Error(path.string() + ": a ShareGPT file is a JSON list of {\"conversations\": [...]}");
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto& e : all) {
      if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array()) continue;
      const json& c = e["conversations"];
      if (c.size() < 2 || !c[0].is_object() || !c[1].is_object()) continue;
      pairs.emplace_back(text_of(c[0].value("value", json())), text_of(c[1].value("value", json())));
    }
    Rng rng(o.seed);
    for (size_t i = pairs.size(); i > 1; --i) std::swap(pairs[i - 1], pairs[size_t(uniform_int(rng, 0, int64_t(i) - 1))]);
    for (const auto& [prompt, reply] : pairs) {
      if (pool.size() >= n) break;
      const int64_t plen = int64_t(codec->encode(prompt).size());
      const int64_t olen = o.output_len > 0 ? o.output_len : int64_t(codec->encode(reply).size());
      if (plen < 4 || (o.output_len <= 0 && olen < 4) || plen > 1024 || plen + olen > 2048) continue;
      pool.push_back({prompt, plen, olen});
    }
  } else if (o.format == "custom") {
    size_t line_no = 0;
    for (std::string line; std::getline(in, line) && pool.size() < n;) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const json j = json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
        throw Error(path.string() + ":" + std::to_string(line_no) + ": expected a JSON object with a string \"prompt\"");
      ServeRequest r;
      r.prompt = j["prompt"].get<std::string>();
      r.prompt_len = codec ? int64_t(codec->encode(r.prompt).size()) : 0;
      r.output_len = o.output_len > 0 ? o.output_len
                     : j.contains("output_tokens") && j["output_tokens"].is_number_integer() ? j["output_tokens"].get<int64_t>()
                                                                                              : 256;
      pool.push_back(std::move(r));
    }
  } else {
    throw Error("--dataset-name '" + o.format + "' is not supported (random, sharegpt, custom)");
  }
  if (pool.empty()) throw Error(path.string() + ": no usable prompts");
  std::vector<ServeRequest> out;
  for (size_t i = 0; i < n; ++i) out.push_back(pool[i % pool.size()]);
  return out;
}

}  // namespace kimi
