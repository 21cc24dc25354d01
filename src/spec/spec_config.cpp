#include "spec/spec_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kimi::spec {

namespace {

constexpr int64_t kMaxSpeculativeTokens = 16;

int64_t int_field(const nlohmann::json& j, const std::string& key, int64_t lo, int64_t hi) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) throw Error("--speculative-config: '" + key + "' must be an integer");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw Error("--speculative-config: '" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "], got " + std::to_string(x));
  return x;
}

}  // namespace

const char* method_name(Method m) {
  switch (m) {
    case Method::Ngram: return "ngram";
    case Method::Eagle3: return "eagle3";
    case Method::Mtp: return "mtp";
    case Method::None: break;
  }
  return "none";
}

int64_t default_disable_by_batch_size(Method m) { return m == Method::Eagle3 || m == Method::Mtp ? 1 : 0; }

SpeculativeConfig parse_speculative_config(const std::string& json_text) {
  SpeculativeConfig c;
  if (json_text.empty()) return c;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("--speculative-config is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error("--speculative-config must be a JSON object");
  static const char* const known[] = {"method", "model", "num_speculative_tokens", "prompt_lookup_max",
                                      "prompt_lookup_min", "draft_tensor_parallel_size", "disable_by_batch_size"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(known), std::end(known), key) == std::end(known))
      throw Error("--speculative-config: unknown key '" + key +
                  "' (known: method, model, num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, "
                  "draft_tensor_parallel_size, disable_by_batch_size)");
  }
  if (!j.contains("method") || !j["method"].is_string())
    throw Error("--speculative-config: 'method' is required: \"eagle3\", \"ngram\" or \"mtp\"");
  const std::string method = j["method"].get<std::string>();
  if (method == "ngram") c.method = Method::Ngram;
  else if (method == "eagle3") c.method = Method::Eagle3;
  else if (method == "mtp" || method == "deepseek_mtp") c.method = Method::Mtp;
  else throw Error("--speculative-config: unknown method '" + method + "' (supported: eagle3, ngram, mtp)");

  if (j.contains("model")) {
    if (!j["model"].is_string()) throw Error("--speculative-config: 'model' must be a path");
    c.model = j["model"].get<std::string>();
  }
  if (c.method == Method::Eagle3 && c.model.empty())
    throw Error("--speculative-config: method eagle3 needs 'model', the draft's directory");
  if (c.method != Method::Eagle3 && !c.model.empty())
    throw Error(std::string("--speculative-config: method ") + method_name(c.method) + " takes no 'model'");
  if (!j.contains("num_speculative_tokens"))
    throw Error("--speculative-config: 'num_speculative_tokens' is required");
  c.num_speculative_tokens = int_field(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens);
  const bool has_max = j.contains("prompt_lookup_max"), has_min = j.contains("prompt_lookup_min");
  if ((has_max || has_min) && c.method != Method::Ngram)
    throw Error("--speculative-config: prompt_lookup_max / prompt_lookup_min apply to method ngram only");
  if (has_max) c.prompt_lookup_max = int_field(j, "prompt_lookup_max", 1, 64);
  if (has_min) c.prompt_lookup_min = int_field(j, "prompt_lookup_min", 1, 64);
  // One given alone sets the other's default around it (vLLM: min defaults to max and vice versa).
  if (has_max && !has_min) c.prompt_lookup_min = std::min(c.prompt_lookup_min, c.prompt_lookup_max);
  if (has_min && !has_max) c.prompt_lookup_max = std::max(c.prompt_lookup_max, c.prompt_lookup_min);
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    throw Error("--speculative-config: prompt_lookup_min (" + std::to_string(c.prompt_lookup_min) +
                ") exceeds prompt_lookup_max (" + std::to_string(c.prompt_lookup_max) + ")");
  if (j.contains("draft_tensor_parallel_size")) {
    c.draft_tensor_parallel_size = int_field(j, "draft_tensor_parallel_size", 1, 1024);
    if (c.draft_tensor_parallel_size != 1)
      throw Error("--speculative-config: draft_tensor_parallel_size must be 1 (the target runs without tensor parallelism)");
  }
  c.disable_by_batch_size = j.contains("disable_by_batch_size") ? int_field(j, "disable_by_batch_size", 0, 1 << 20)
                                                                 : default_disable_by_batch_size(c.method);
  return c;
}

void check_against_target(const SpeculativeConfig& c, const ModelConfig& target) {
  if (c.method == Method::Mtp) {
    if (target.num_nextn_predict_layers < 1)
      throw Error("--speculative-config: method mtp needs a checkpoint with an MTP layer (num_nextn_predict_layers >= 1); "
                  "this one has none (Kimi-K2.5 ships none: use eagle3 or ngram)");
  }
  if (c.method == Method::Eagle3 && !std::filesystem::is_directory(c.model))
    throw Error("--speculative-config: the draft directory '" + c.model.string() + "' does not exist");
}

}  // namespace kimi::spec
