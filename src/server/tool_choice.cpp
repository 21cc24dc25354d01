#include "server/tool_choice.h"

#include "server/api_error.h"
#include "server/tool_call_ids.h"
#include "tokenizer/tokenizer.h"

namespace kimi {

namespace {
constexpr int64_t kMaxParallelCalls = 8;
}  // namespace

structured::StructuredSpec forced_tool_calls_spec(const ApiRequest& r, const Tokenizer& tokenizer) {
  if (r.tools.is_null()) return {};
  // auto is constrained only when a tool asks for it (strict: true), as vLLM does: text or calls,
  // the strict tools' arguments following their schemas, the others' any JSON object.
  bool any_strict = false;
  for (const auto& t : r.tools) any_strict |= t["function"].contains("strict") && t["function"]["strict"] == true;
  const bool auto_strict = r.tool_choice == "auto" && any_strict;
  if (r.tool_choice != "required" && r.tool_choice != "named" && !auto_strict) return {};
  nlohmann::json tokens;
  for (const auto& [key, text] : {std::pair<const char*, const char*>{"section_begin", "<|tool_calls_section_begin|>"},
                                  {"section_end", "<|tool_calls_section_end|>"},
                                  {"call_begin", "<|tool_call_begin|>"},
                                  {"argument_begin", "<|tool_call_argument_begin|>"},
                                  {"call_end", "<|tool_call_end|>"}}) {
    const auto id = tokenizer.token_id(text);
    if (!id) throw ApiError(400, std::string("tool_choice: this model's tokenizer has no ") + text + " token", "tool_choice");
    tokens[key] = *id;
  }
  nlohmann::json tools = nlohmann::json::array();
  for (const auto& t : r.tools) {
    const auto& f = t["function"];
    if (r.tool_choice == "named" && f["name"] != r.tool_choice_name) continue;
    nlohmann::json tool = {{"name", f["name"]}};
    const bool constrained = !auto_strict || (f.contains("strict") && f["strict"] == true);
    if (f.contains("parameters") && constrained) tool["parameters"] = f["parameters"];
    tools.push_back(std::move(tool));
  }
  // Kimi's ids count calls across the conversation (functions.NAME:IDX), as the answer's ids do.
  const int64_t earlier = count_history_tool_calls(r.messages);
  const nlohmann::json spec = {{"tools", tools},
                               {"min_calls", 1},
                               {"max_calls", r.parallel_tool_calls ? kMaxParallelCalls : 1},
                               {"first_index", earlier},
                               {"tokens", tokens},
                               {"allow_text", auto_strict}};
  return {structured::SpecKind::ToolCalls, spec.dump(), "tool_choice"};
}

}  // namespace kimi
