#pragma once
// GBNF-style grammar text (llama.cpp's notation, vLLM's `grammar` / guided_grammar): rules
// `name ::= alternatives`, string literals with escapes, character classes [a-z] [^...], `.`,
// rule references, groups, * + ? {m} {m,} {m,n}, # comments, and <[ID]> for the special token
// of that id (special_token_bytes). The start rule is `root`.
#include <string_view>

#include "structured/grammar.h"

namespace kimi::structured {

Grammar compile_gbnf(std::string_view text);

}  // namespace kimi::structured
