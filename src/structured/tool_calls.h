#pragma once
// Forced tool calls (tool_choice "required" or a named function): a grammar for Kimi's
// tool-call section, <|tool_calls_section_begin|> then per call <|tool_call_begin|>
// functions.NAME:IDX <|tool_call_argument_begin|> ARGUMENTS <|tool_call_end|>, then
// <|tool_calls_section_end|>, whose names are the allowed tools, whose ids count on from the
// conversation's calls, and whose arguments follow each tool's parameters schema.
//
// The spec text (SpecKind::ToolCalls) is JSON: {"tools": [{"name", "parameters"}], "min_calls",
// "max_calls", "first_index", "tokens": {"section_begin", "section_end", "call_begin",
// "argument_begin", "call_end"} (special token ids), "allow_text"}. allow_text (tool_choice auto
// with strict tools): any text, optionally followed by the section.
#include <string_view>

#include "structured/grammar.h"

namespace kimi::structured {

Grammar compile_tool_calls(std::string_view spec_text);

}  // namespace kimi::structured
