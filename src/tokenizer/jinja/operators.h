#pragma once
// Python semantics of the operators templates use: arithmetic (with int overflow checked, since
// Python ints don't overflow), comparison, membership, indexing, slicing and iteration.
#include <cstdint>
#include <optional>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace kimi::jinja {

enum class BinaryOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat };

Value binary_op(BinaryOp op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);

bool equals(const Value& a, const Value& b);
// -1, 0 or 1 as Python's < and ==; throws BuiltinError where Python raises TypeError.
int compare(const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // `item in container`

// obj[key]; missing keys and out-of-range indices give undefined, as in Jinja2.
Value get_item(const Value& obj, const Value& key);
// obj.name: a method of str/list/dict first (as Python getattr), then the item `name`.
Value get_attr(const Value& obj, std::string_view name);
Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step);

// The items a for loop over `v` visits (dict: keys; str: characters; undefined: none).
List iterate(const Value& v);
int64_t length(const Value& v);

}  // namespace kimi::jinja
