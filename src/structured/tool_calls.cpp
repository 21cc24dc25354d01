#include "structured/tool_calls.h"

#include <nlohmann/json.hpp>
#include <string>

#include "structured/json_schema.h"

namespace kimi::structured {

namespace {
constexpr int64_t kMaxCalls = 64;
}  // namespace

Grammar compile_tool_calls(std::string_view spec_text) {
  const nlohmann::ordered_json spec = parse_schema_text(spec_text);
  if (!spec.is_object() || !spec.contains("tools") || !spec["tools"].is_array() || spec["tools"].empty() ||
      !spec.contains("tokens") || !spec["tokens"].is_object())
    throw GrammarError("tool calls: needs 'tools' (non-empty) and 'tokens'");
  auto integer = [&](const nlohmann::ordered_json& o, const char* k, int64_t lo, int64_t hi) {
    if (!o.contains(k) || !o[k].is_number_integer() || o[k].get<int64_t>() < lo || o[k].get<int64_t>() > hi)
      throw GrammarError(std::string("tool calls: '") + k + "' must be an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
    return o[k].get<int64_t>();
  };
  const int64_t min_calls = integer(spec, "min_calls", 1, kMaxCalls);
  const int64_t max_calls = integer(spec, "max_calls", std::max<int64_t>(min_calls, 1), kMaxCalls);
  const int64_t first = integer(spec, "first_index", 0, 1 << 30);
  const auto& tk = spec["tokens"];
  GrammarBuilder b;
  auto token = [&](const char* k) { return b.literal(special_token_bytes(int32_t(integer(tk, k, 0, INT32_MAX)))); };
  const Sym section_begin = token("section_begin"), section_end = token("section_end"), call_begin = token("call_begin"),
            argument_begin = token("argument_begin"), call_end = token("call_end");
  // Per tool: its name and the grammar of its arguments (any JSON object without parameters).
  std::vector<std::pair<std::string, Sym>> tools;
  for (const auto& t : spec["tools"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      throw GrammarError("tool calls: each tool needs a 'name'");
    const auto params = t.find("parameters");
    const nlohmann::ordered_json schema =
        params == t.end() || params->is_null() ? nlohmann::ordered_json{{"type", "object"}} : *params;
    Sym args;
    try {
      args = add_json_schema(b, schema);
    } catch (const GrammarError& e) {
      throw GrammarError("tool '" + t["name"].get<std::string>() + "': " + e.what());
    }
    tools.push_back({t["name"].get<std::string>(), args});
  }
  // call_k rest_{k+1}, where calls from min_calls on are optional.
  Sym rest = b.empty();
  for (int64_t k = max_calls - 1; k >= 0; --k) {
    std::vector<Seq> alts;
    for (const auto& [name, args] : tools) {
      Seq s = {call_begin};
      b.append_literal(s, "functions." + name + ":" + std::to_string(first + k));
      s.insert(s.end(), {argument_begin, args, call_end, rest});
      alts.push_back(std::move(s));
    }
    if (k >= min_calls) alts.push_back({});
    rest = b.alts(std::move(alts), "call");
  }
  const uint32_t root = b.new_rule("root");
  if (spec.contains("allow_text") && spec["allow_text"] == true) {
    // tool_choice auto with strict tools: any text, then optionally the section.
    ByteClass printable;
    printable.set_range(0x09, 0x0D);
    printable.set_range(0x20, 0x7F);
    const Sym text = b.repeat(b.utf8_char(printable), 0, -1);
    b.add_alt(root, {text});
    b.add_alt(root, {text, section_begin, rest, section_end});
  } else {
    b.add_alt(root, {section_begin, rest, section_end});
  }
  return b.build(root);
}

}  // namespace kimi::structured
