#pragma once
// tool_choice "required" and named functions, enforced: the structured-output spec that forces a
// Kimi tool-call section (structured/tool_calls.h) with calls of the allowed tools, arguments
// following their parameters schemas, ids counting on from the conversation's earlier calls, at
// most one call when parallel_tool_calls is false.
#include "server/openai_protocol.h"
#include "structured/spec.h"

namespace kimi {

class Tokenizer;

// Inactive unless the request has tools and tool_choice required or named, or auto with a tool
// marked strict (then text or calls, strict tools' arguments per their schemas). Throws ApiError(400)
// when the tokenizer lacks the tool-call tokens.
structured::StructuredSpec forced_tool_calls_spec(const ApiRequest& r, const Tokenizer& tokenizer);

}  // namespace kimi
