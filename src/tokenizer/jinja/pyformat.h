#pragma once
// Values as Python writes them: str() for output, repr() inside containers, json.dumps for tojson.
// Byte-exact agreement with Python matters here because these strings end up in prompts.
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace kimi::jinja {

std::string type_name(const Value& v);      // Python's type name: 'str', 'int', 'NoneType', ...
std::string float_repr(double d);           // repr(float): shortest round-trip, "1.0", "1e+16", "inf"
std::string string_repr(std::string_view s);  // repr(str): quoted and escaped
std::string repr(const Value& v);
std::string to_str(const Value& v);         // str(v); undefined renders as ""

struct JsonOptions {
  std::optional<std::string> indent;  // null: one line; else this string per nesting level
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// json.dumps(v, ...); throws BuiltinError for values JSON cannot hold (undefined, functions, namespaces).
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace kimi::jinja
