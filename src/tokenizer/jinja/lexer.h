#pragma once
// Splits template source into text and the tokens of its {{ }} / {% %} tags, applying Jinja2's
// whitespace rules on the way: "-" markers, trim_blocks, lstrip_blocks, "+" markers, and the
// removal of one trailing newline. Comments and {% raw %} are resolved here too.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/error.h"

namespace kimi::jinja {

enum class TokenType { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };

struct Token {
  TokenType type = TokenType::End;
  std::string text;  // Text: the literal text; Name/String: the value; Operator: the symbol
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

struct LexOptions {
  bool trim_blocks = false;
  bool lstrip_blocks = false;
  bool keep_trailing_newline = false;
  std::string name = "template";  // for error messages
};

std::vector<Token> tokenize(std::string_view source, const LexOptions& options);

// "NAME:LINE:COLUMN: " — the prefix of every positioned template error.
std::string error_prefix(const std::string& name, SourcePos pos);

}  // namespace kimi::jinja
