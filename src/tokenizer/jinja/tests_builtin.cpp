// Jinja2's builtin tests (`x is defined`, `n is divisibleby 3`, ...), with Python's type rules:
// bool counts as a number but not as an integer; strings, lists and dicts are iterable sequences.
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pyformat.h"
#include "tokenizer/jinja/strings.h"

namespace kimi::jinja {

namespace {

const Value& one_arg(const CallArgs& a, const char* test) {
  const BoundArgs b(a, test, {"other"});
  if (!b.has(0)) throw BuiltinError(std::string("test '") + test + "' needs an argument");
  return *b.get(0);
}

void no_args(const CallArgs& a, const char* test) { (void)BoundArgs(a, test, {}); }

int64_t need_int(const Value& v, const char* test) {
  if (v.is_int() || v.is_bool()) return v.get_int();
  throw BuiltinError(std::string("test '") + test + "' expects an integer, got " + type_name(v));
}

bool t_defined(Runtime&, const Value& v, CallArgs& a) { no_args(a, "defined"); return !v.is_undefined(); }
bool t_undefined(Runtime&, const Value& v, CallArgs& a) { no_args(a, "undefined"); return v.is_undefined(); }
bool t_none(Runtime&, const Value& v, CallArgs& a) { no_args(a, "none"); return v.is_none(); }
bool t_boolean(Runtime&, const Value& v, CallArgs& a) { no_args(a, "boolean"); return v.is_bool(); }
bool t_true(Runtime&, const Value& v, CallArgs& a) { no_args(a, "true"); return v.is_bool() && v.get_bool(); }
bool t_false(Runtime&, const Value& v, CallArgs& a) { no_args(a, "false"); return v.is_bool() && !v.get_bool(); }
bool t_integer(Runtime&, const Value& v, CallArgs& a) { no_args(a, "integer"); return v.is_int(); }
bool t_float(Runtime&, const Value& v, CallArgs& a) { no_args(a, "float"); return v.is_float(); }
bool t_number(Runtime&, const Value& v, CallArgs& a) { no_args(a, "number"); return v.is_numeric(); }
bool t_string(Runtime&, const Value& v, CallArgs& a) { no_args(a, "string"); return v.is_string(); }
bool t_mapping(Runtime&, const Value& v, CallArgs& a) { no_args(a, "mapping"); return v.is_dict(); }
bool t_callable(Runtime&, const Value& v, CallArgs& a) { no_args(a, "callable"); return v.is_function(); }
bool t_escaped(Runtime&, const Value&, CallArgs& a) { no_args(a, "escaped"); return false; }

bool t_iterable(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "iterable");
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}

bool t_sequence(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "sequence");
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}

bool t_odd(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "odd");
  return need_int(v, "odd") % 2 != 0;
}

bool t_even(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "even");
  return need_int(v, "even") % 2 == 0;
}

bool t_divisibleby(Runtime&, const Value& v, CallArgs& a) {
  const Value& n = one_arg(a, "divisibleby");
  return binary_op(BinaryOp::Mod, v, n).get_float() == 0;
}

bool t_eq(Runtime&, const Value& v, CallArgs& a) { return equals(v, one_arg(a, "eq")); }
bool t_ne(Runtime&, const Value& v, CallArgs& a) { return !equals(v, one_arg(a, "ne")); }
bool t_lt(Runtime&, const Value& v, CallArgs& a) { return compare(v, one_arg(a, "lt")) < 0; }
bool t_le(Runtime&, const Value& v, CallArgs& a) { return compare(v, one_arg(a, "le")) <= 0; }
bool t_gt(Runtime&, const Value& v, CallArgs& a) { return compare(v, one_arg(a, "gt")) > 0; }
bool t_ge(Runtime&, const Value& v, CallArgs& a) { return compare(v, one_arg(a, "ge")) >= 0; }
bool t_in(Runtime&, const Value& v, CallArgs& a) { return contains(one_arg(a, "in"), v); }

bool t_sameas(Runtime&, const Value& v, CallArgs& a) {
  const Value& o = one_arg(a, "sameas");
  if (v.identity() || o.identity()) return v.identity() == o.identity();
  return v.kind() == o.kind() && equals(v, o);  // None, True, False and small values are singletons in Python
}

bool t_lower(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "lower");
  return pystr::is_lower(to_str(v));
}

bool t_upper(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "upper");
  return pystr::is_upper(to_str(v));
}

bool t_filter(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "filter");
  return v.is_string() && find_filter(v.get_string()) != nullptr;
}

bool t_test(Runtime&, const Value& v, CallArgs& a) {
  no_args(a, "test");
  return v.is_string() && find_test(v.get_string()) != nullptr;
}

}  // namespace

TestFn find_test(std::string_view name) {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
      {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
      {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence},
      {"callable", t_callable}, {"escaped", t_escaped}, {"odd", t_odd}, {"even", t_even},
      {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
      {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le}, {"gt", t_gt},
      {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in}, {"sameas", t_sameas},
      {"lower", t_lower}, {"upper", t_upper}, {"filter", t_filter}, {"test", t_test},
  };
  const auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

}  // namespace kimi::jinja
