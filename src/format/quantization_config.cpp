#include "format/quantization_config.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <fstream>

#include "common/error.h"

namespace kimi {

namespace {

using nlohmann::json;

const json* member(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A "re:" entry is a regular expression matched against the whole module name; anything else
// is an exact name (compressed-tensors also lets a bare name match as a suffix: "lm_head"
// matches "language_model.lm_head").
bool is_pattern(const std::string& s) { return s.rfind("re:", 0) == 0; }

bool name_matches(const std::string& module, const std::string& entry) {
  if (module == entry) return true;
  return module.size() > entry.size() && module.compare(module.size() - entry.size(), entry.size(), entry) == 0 &&
         module[module.size() - entry.size() - 1] == '.';
}

ModulePattern compile(const std::string& entry, const std::string& source) { return ModulePattern(entry, source); }

// An integer argument (absent: the fallback). nlohmann's value<int>() would convert a float or a
// wider integer silently (num_bits 4294967300 read as 4; 1e60 undefined behaviour).
int64_t integer_arg(const json& obj, const char* key, int64_t fallback, const std::string& where) {
  const json* v = member(obj, key);
  if (!v) return fallback;
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)))
    throw Error(where + ": \"" + key + "\" is not an integer (" + v->dump() + ")");
  return v->get<int64_t>();
}

CompressedTensorsScheme parse_scheme(const json& g, const std::string& where, const std::string& format) {
  const json* w = member(g, "weights");
  if (!w || !w->is_object()) throw Error(where + ": no \"weights\" arguments");
  CompressedTensorsScheme s;
  const int64_t bits = integer_arg(*w, "num_bits", 0, where);
  if (bits != 4 && bits != 8) throw Error(where + ": " + std::to_string(bits) + "-bit weights are not supported (4 or 8)");
  s.bits = int(bits);
  const std::string type = w->value("type", "int");
  const std::string strategy = w->value("strategy", "");
  if (type != "int") throw Error(where + ": weight type '" + type + "' is not supported (int only)");
  if (w->value("dynamic", false)) throw Error(where + ": dynamic weight quantization is not supported");
  if (const json* a = member(*w, "actorder"); a && !(a->is_boolean() && !a->get<bool>()))
    throw Error(where + ": actorder (GPTQ act-order) checkpoints are not supported");
  s.symmetric = w->value("symmetric", true);
  if (strategy == "group") {
    s.group_size = integer_arg(*w, "group_size", 0, where);
    if (s.group_size <= 0 || s.group_size % 32 != 0)
      throw Error(where + ": group_size " + std::to_string(s.group_size) + " is not supported (a multiple of 32)");
  } else if (strategy == "channel") {
    s.group_size = 0;
  } else {
    throw Error(where + ": weight strategy '" + strategy + "' is not supported (group or channel)");
  }
  if (s.bits == 4) {
    if (format != "pack-quantized") throw Error(where + ": 4-bit weights need format pack-quantized, not '" + format + "'");
  } else if (s.bits == 8) {
    if (format != "int-quantized") throw Error(where + ": 8-bit weights need format int-quantized, not '" + format + "'");
    if (!s.symmetric) throw Error(where + ": asymmetric 8-bit weights are not supported");
  } else {
    throw Error(where + ": " + std::to_string(s.bits) + "-bit weights are not supported (4 or 8)");
  }
  if (const json* in = member(g, "input_activations")) {
    if (integer_arg(*in, "num_bits", 0, where) != 8 || in->value("type", "int") != "int" || !in->value("dynamic", false) ||
        !in->value("symmetric", true))
      throw Error(where + ": only dynamic symmetric int8 input activations are supported");
    s.dynamic_int8_activations = true;
  }
  if (member(g, "output_activations")) throw Error(where + ": output activation quantization is not supported");
  return s;
}

}  // namespace

ModulePattern::ModulePattern(const std::string& entry, const std::string& source) : pattern_(entry) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  const std::string re = entry.substr(3);
  pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(), PCRE2_UTF, &code, &offset, nullptr);
  if (!c) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    throw Error(source + ": quantization_config pattern '" + entry + "' is not a valid regex: " +
                reinterpret_cast<const char*>(msg));
  }
  code_.reset(c, pcre2_code_free);
}

bool ModulePattern::matches(const std::string& module) const {
  // Bounded backtracking: far above what any real pattern needs on a module name.
  const std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> ctx(
      pcre2_match_context_create(nullptr), pcre2_match_context_free);
  pcre2_set_match_limit(ctx.get(), 1'000'000);
  pcre2_set_depth_limit(ctx.get(), 10'000);
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr), pcre2_match_data_free);
  const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(module.data()), module.size(), 0,
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED, md.get(), ctx.get());
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  throw Error("quantization_config pattern '" + pattern_ + "' on '" + module + "': matching failed (code " +
              std::to_string(rc) + ", e.g. too much backtracking)");
}

CompressedTensorsConfig CompressedTensorsConfig::parse(const json& qc, const std::string& source) {
  try {
    return parse_checked(qc, source);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw Error(source + ": quantization_config: " + e.what());
  }
}

CompressedTensorsConfig CompressedTensorsConfig::parse_checked(const json& qc, const std::string& source) {
  const std::string where = source + ": quantization_config";
  if (!qc.is_object()) throw Error(where + " is not an object");
  const std::string method = qc.value("quant_method", "");
  if (method != "compressed-tensors")
    throw Error(where + ": quant_method '" + method + "' is not supported (compressed-tensors, or msModelSlim's " +
                ModelSlimDescription::kFileName + ")");
  const std::string status = qc.value("quantization_status", "compressed");
  if (status != "compressed" && status != "frozen")
    throw Error(where + ": quantization_status '" + status + "' is not a stored (compressed) checkpoint");
  if (member(qc, "kv_cache_scheme")) throw Error(where + ": kv_cache_scheme is not supported");
  const std::string format = qc.value("format", "");
  const json* groups = member(qc, "config_groups");
  if (!groups || !groups->is_object() || groups->empty()) throw Error(where + ": no config_groups");

  CompressedTensorsConfig c;
  for (auto& [name, g] : groups->items()) {
    const std::string gw = where + ".config_groups." + name;
    Group group;
    group.scheme = parse_scheme(g, gw, g.value("format", format));
    const json* targets = member(g, "targets");
    if (!targets || !targets->is_array() || targets->empty()) throw Error(gw + ": no targets");
    for (const json& t : *targets) {
      const std::string s = t.get<std::string>();
      if (s == "Linear") group.any_linear = true;
      else if (is_pattern(s)) group.patterns.push_back(compile(s, source));
      else group.names.push_back(s);
    }
    c.groups_.push_back(std::move(group));
  }
  if (const json* ignore = member(qc, "ignore")) {
    for (const json& e : *ignore) {
      const std::string s = e.get<std::string>();
      if (is_pattern(s)) c.ignore_patterns_.push_back(compile(s, source));
      else c.ignore_names_.push_back(s);
    }
  }
  return c;
}

std::optional<CompressedTensorsScheme> CompressedTensorsConfig::scheme_for(const std::string& module) const {
  for (const std::string& n : ignore_names_)
    if (name_matches(module, n)) return std::nullopt;
  for (const ModulePattern& r : ignore_patterns_)
    if (r.matches(module)) return std::nullopt;
  // compressed-tensors prefers an exact-name target over a regex over a module-type target.
  for (const Group& g : groups_)
    for (const std::string& n : g.names)
      if (name_matches(module, n)) return g.scheme;
  for (const Group& g : groups_)
    for (const ModulePattern& r : g.patterns)
      if (r.matches(module)) return g.scheme;
  for (const Group& g : groups_)
    if (g.any_linear) return g.scheme;
  return std::nullopt;
}

json CompressedTensorsConfig::kimi_k25_int4_json() {
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"kv_cache_scheme", nullptr},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights",
               {{"num_bits", 4},
                {"type", "int"},
                {"symmetric", true},
                {"strategy", "group"},
                {"group_size", 32},
                {"dynamic", false},
                {"observer", "minmax"},
                {"actorder", nullptr}}},
              {"input_activations", nullptr},
              {"output_activations", nullptr}}}}},
          {"ignore",
           {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}}};
}

std::optional<ModelSlimDescription> ModelSlimDescription::load(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / kFileName;
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what());
  }
  return parse(j, path.string());
}

ModelSlimDescription ModelSlimDescription::parse(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(source + ": not a JSON object");
  ModelSlimDescription d;
  d.source_ = source;
  for (auto& [key, value] : j.items()) {
    if (key == "model_quant_type") {
      d.model_quant_type_ = value.is_string() ? value.get<std::string>() : "";
    } else if (value.is_string()) {
      d.types_.emplace(key, value.get<std::string>());
    }
    // Other settings (version, group_size, kv_cache_type, fa_quant_type ...) are not types.
  }
  return d;
}

std::string ModelSlimDescription::type_of(const std::string& tensor_name) const {
  auto it = types_.find(tensor_name);
  return it == types_.end() ? "FLOAT" : it->second;
}

}  // namespace kimi
