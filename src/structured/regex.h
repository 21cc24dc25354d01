#pragma once
// Regular expressions (the ECMAScript / Python subset that JSON Schema patterns and vLLM's
// guided_regex use) compiled to grammar symbols matching the whole text: literals, `.`, classes
// with ranges and negation, \d \w \s (and negations), escapes (\n \t \xHH \uHHHH), groups
// (capturing, (?:...), named), alternation, * + ? {m} {m,} {m,n} (lazy and possessive suffixes
// read as plain). Anchors ^ and $ are accepted only at the ends. Backreferences, lookaround and
// \b are GrammarErrors naming them.
#include <string_view>

#include "structured/grammar.h"

namespace kimi::structured {

// json_string: the match as it is written inside a JSON string literal (see CharSet::compile).
Sym compile_regex(GrammarBuilder& b, std::string_view pattern, bool json_string = false);

}  // namespace kimi::structured
