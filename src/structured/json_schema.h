#pragma once
// JSON Schema to grammar: the generated text is a JSON document valid for the schema.
// Supported: type (one or a list), properties / required / additionalProperties (properties in
// the schema's order; additionalProperties defaults to false when `properties` is given, as in
// OpenAI's strict mode), enum / const, items / minItems / maxItems, nested schemas, $ref into
// $defs / definitions / any JSON pointer of the document (recursive schemas too), anyOf / oneOf
// (oneOf as anyOf: exclusivity is not enforced), allOf of one schema, string minLength /
// maxLength / pattern / format (date, time, date-time, uuid, email, ipv4, uri), integer and
// number minimum / maximum / exclusiveMinimum / exclusiveMaximum. Other validation keywords
// (multipleOf, patternProperties, if/then/else, not, uniqueItems, prefixItems, ...) are
// GrammarErrors naming the keyword. Whitespace between tokens is bounded and numbers have at
// most 16 integer and 15 fraction digits, so every output is finite.
#include <nlohmann/json.hpp>
#include <string_view>

#include "structured/grammar.h"

namespace kimi::structured {

Grammar compile_json_schema(std::string_view schema_text);
// The schema's values as a symbol of a grammar being built (tool-call arguments).
Sym add_json_schema(GrammarBuilder& b, const nlohmann::ordered_json& schema);
// Parses schema text with a bound on its nesting; GrammarError when it is not JSON.
nlohmann::ordered_json parse_schema_text(std::string_view text);
Grammar compile_json_schema(const nlohmann::ordered_json& schema);
// Any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace kimi::structured
