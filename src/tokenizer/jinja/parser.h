#pragma once
// Recursive-descent parser from tokens to the AST, following Jinja2's grammar and operator
// precedence. Nesting is bounded (kMaxNesting) so hostile input fails with an error instead of
// exhausting the stack here or later in the interpreter.
#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace kimi::jinja {

inline constexpr int kMaxNesting = 200;

Body parse(std::vector<Token> tokens, const std::string& name);

}  // namespace kimi::jinja
