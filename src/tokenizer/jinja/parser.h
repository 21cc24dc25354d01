#pragma once
// Recursive-descent parser from tokens to the AST, following Jinja2's grammar and operator
// precedence. Nesting is bounded so hostile input fails with an error instead of exhausting the
// stack here, in the interpreter or in the AST's destructors: kMaxNesting bounds the parser's own
// recursion (brackets, blocks, `not`/unary chains), kMaxExprDepth the height of an expression tree
// (which loops build too, e.g. `a + b + c + ...` or long filter chains).
#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace kimi::jinja {

inline constexpr int kMaxNesting = 200;
inline constexpr int kMaxExprDepth = 500;

Body parse(std::vector<Token> tokens, const std::string& name);

}  // namespace kimi::jinja
