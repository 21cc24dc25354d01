#pragma once
// Parsing of every request body the server reads: JSON text into a document, with a bound on
// how deeply arrays and objects nest. Everything downstream (copies, dumps, the chat template's
// conversion of messages and tools) walks the document recursively, so a body nested 100,000
// levels deep would overflow the stack there; it is refused here, before any DOM is built
// deeper than the bound.
#include <nlohmann/json.hpp>
#include <string_view>

namespace kimi {

using ojson = nlohmann::ordered_json;

// Deepest array/object nesting a request may have. Real requests (tool parameter schemas
// included) stay far below it; pydantic's JSON parser, which vLLM's requests go through, stops
// at 200.
inline constexpr int kMaxJsonDepth = 128;

// The body as JSON; throws ApiError(400) for text that is not JSON, or that nests deeper than
// kMaxJsonDepth (the parse stops at the first level too deep, so no deep DOM is ever built).
ojson parse_json_body(std::string_view body);

}  // namespace kimi
