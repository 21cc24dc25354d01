#pragma once
// What a request asks its output to follow (response_format, structured_outputs, guided_*): plain
// data, the kind and the text, so that it crosses a process boundary like the rest of
// SamplingParams. Compiled into a grammar by structured/compile.h.
#include <cstdint>
#include <string>

namespace kimi::structured {

enum class SpecKind : uint8_t {
  None,        // unconstrained
  JsonObject,  // any JSON object (response_format json_object)
  JsonSchema,  // text: a JSON Schema
  Regex,       // text: a regular expression the whole output matches
  Choice,      // text: a JSON array of strings, the output is one of them
  Grammar,     // text: a GBNF-style grammar with a `root` rule
  ToolCalls,   // text: a forced Kimi tool-call section (structured/tool_calls.h)
};

struct StructuredSpec {
  SpecKind kind = SpecKind::None;
  std::string text;
  std::string param = "response_format";  // the request field it came from, for error messages
  // The constraint starts after this token has been generated (a reasoning model's </think>);
  // -1: from the first generated token.
  int32_t start_after_token = -1;

  bool active() const { return kind != SpecKind::None; }
};

}  // namespace kimi::structured
