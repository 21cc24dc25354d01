#include "structured/compile.h"

#include <nlohmann/json.hpp>

#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/tool_calls.h"

namespace kimi::structured {

namespace {

Grammar choice_grammar(const std::string& text) {
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw GrammarError(std::string("choice: not a JSON list of strings: ") + e.what());
  }
  if (!list.is_array() || list.empty()) throw GrammarError("choice: must be a non-empty list of strings");
  GrammarBuilder b;
  const uint32_t root = b.new_rule("root");
  for (const auto& c : list) {
    if (!c.is_string()) throw GrammarError("choice: must be a list of strings");
    Seq s;
    b.append_literal(s, c.get<std::string>());
    b.add_alt(root, std::move(s));
  }
  return b.build(root);
}

Grammar regex_grammar(const std::string& text) {
  GrammarBuilder b;
  const uint32_t root = b.new_rule("root");
  b.add_alt(root, {compile_regex(b, text)});
  return b.build(root);
}

}  // namespace

std::shared_ptr<const Recognizer> compile(const StructuredSpec& spec) {
  switch (spec.kind) {
    case SpecKind::JsonObject: return std::make_shared<const Recognizer>(json_object_grammar());
    case SpecKind::JsonSchema: return std::make_shared<const Recognizer>(compile_json_schema(std::string_view(spec.text)));
    case SpecKind::Regex: return std::make_shared<const Recognizer>(regex_grammar(spec.text));
    case SpecKind::Choice: return std::make_shared<const Recognizer>(choice_grammar(spec.text));
    case SpecKind::Grammar: return std::make_shared<const Recognizer>(compile_gbnf(spec.text));
    case SpecKind::ToolCalls: return std::make_shared<const Recognizer>(compile_tool_calls(spec.text));
    case SpecKind::None: break;
  }
  throw GrammarError("internal: compile() of an empty spec");
}

}  // namespace kimi::structured
