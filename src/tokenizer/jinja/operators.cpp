#include "tokenizer/jinja/operators.h"

#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pyformat.h"
#include "tokenizer/jinja/unicode.h"

namespace kimi::jinja {

namespace {
// Strings or lists built by `*` larger than this are refused instead of exhausting memory.
constexpr int64_t kMaxRepeatBytes = int64_t(1) << 28;
constexpr int kMaxCompareDepth = 512;

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    throw BuiltinError(u.undefined_name().empty() ? std::string("an undefined value was used with '") + op + "'"
                                                  : "'" + u.undefined_name() + "' is undefined");
  }
  throw BuiltinError(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                     type_name(b) + "'");
}

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

[[noreturn]] void overflow() { throw BuiltinError("integer overflow (templates here use 64-bit integers)"); }

int64_t add_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

// Python's float floor division and modulo (the sign of the result follows the divisor).
std::pair<double, double> float_divmod(double a, double b) {
  if (b == 0) throw BuiltinError("float division by zero");
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : (seq.is_tuple() ? Value::tuple({}) : Value::list());
  if (seq.is_string()) {
    const std::string& s = seq.get_string();
    if (int64_t(s.size()) * n > kMaxRepeatBytes && !s.empty()) throw BuiltinError("string repetition result is too large");
    std::string out;
    out.reserve(s.size() * size_t(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const List& items = seq.get_list();
  if (int64_t(items.size()) * n > kMaxRepeatBytes / 16 && !items.empty()) throw BuiltinError("list repetition result is too large");
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) throw BuiltinError("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(double(base), double(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = mul_checked(result, base);
    exp >>= 1;
    if (exp > 0) base = mul_checked(base, base);
  }
  return Value::integer(result);
}

bool equals_at(const Value& a, const Value& b, int depth);

bool sequences_equal(const List& x, const List& y, int depth) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!equals_at(x[i], y[i], depth + 1)) return false;
  return true;
}

bool equals_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxCompareDepth) throw BuiltinError("values are nested too deeply to compare");
  if (a.is_numeric() && b.is_numeric()) {
    if (is_integral(a) && is_integral(b)) return a.get_int() == b.get_int();
    return a.get_float() == b.get_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.get_string() == b.get_string();
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return a.identity() == b.identity() || sequences_equal(a.get_list(), b.get_list(), depth);
    case Value::Kind::Dict: {
      const Dict& x = a.get_dict();
      const Dict& y = b.get_dict();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equals_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxCompareDepth) throw BuiltinError("values are nested too deeply to compare");
  if (a.is_numeric() && b.is_numeric()) {
    if (is_integral(a) && is_integral(b)) return a.get_int() < b.get_int() ? -1 : (a.get_int() > b.get_int() ? 1 : 0);
    const double x = a.get_float(), y = b.get_float();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.get_string().compare(b.get_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const List& x = a.get_list();
    const List& y = b.get_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals_at(x[i], y[i], depth + 1)) continue;
      return compare_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) unsupported("<", a, b);
  throw BuiltinError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// Python's slice index normalisation (PySlice_AdjustIndices).
std::vector<int64_t> slice_positions(int64_t len, std::optional<int64_t> start, std::optional<int64_t> stop,
                                     std::optional<int64_t> step_opt) {
  const int64_t step = step_opt.value_or(1);
  if (step == 0) throw BuiltinError("slice step cannot be zero");
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? len - 1 : len;
  const auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  const int64_t b = adjust(start, step < 0 ? upper : lower);
  const int64_t e = adjust(stop, step < 0 ? lower : upper);
  std::vector<int64_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e;) {
    out.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // a huge step: nothing further is in range
  }
  return out;
}
}  // namespace

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  const bool ints = is_integral(a) && is_integral(b);
  const bool nums = a.is_numeric() && b.is_numeric();
  switch (op) {
    case BinaryOp::Add:
      if (ints) return Value::integer(add_checked(a.get_int(), b.get_int()));
      if (nums) return Value::number(a.get_float() + b.get_float());
      if (a.is_string() && b.is_string()) return Value::string(a.get_string() + b.get_string());
      if (a.kind() == b.kind() && a.is_sequence()) {
        List out = a.get_list();
        out.insert(out.end(), b.get_list().begin(), b.get_list().end());
        return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
      }
      unsupported("+", a, b);
    case BinaryOp::Sub:
      if (ints) return Value::integer(sub_checked(a.get_int(), b.get_int()));
      if (nums) return Value::number(a.get_float() - b.get_float());
      unsupported("-", a, b);
    case BinaryOp::Mul:
      if (ints) return Value::integer(mul_checked(a.get_int(), b.get_int()));
      if (nums) return Value::number(a.get_float() * b.get_float());
      if ((a.is_string() || a.is_sequence()) && is_integral(b)) return repeat(a, b.get_int());
      if ((b.is_string() || b.is_sequence()) && is_integral(a)) return repeat(b, a.get_int());
      unsupported("*", a, b);
    case BinaryOp::Div:
      if (nums) {
        if (b.get_float() == 0) throw BuiltinError("division by zero");
        return Value::number(a.get_float() / b.get_float());
      }
      unsupported("/", a, b);
    case BinaryOp::FloorDiv:
    case BinaryOp::Mod:
      if (ints) {
        const int64_t x = a.get_int(), y = b.get_int();
        if (y == 0) throw BuiltinError(op == BinaryOp::Mod ? "integer modulo by zero" : "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (op == BinaryOp::Mod) return Value::integer(0);
          overflow();
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          m += y;
          q -= 1;
        }
        return Value::integer(op == BinaryOp::Mod ? m : q);
      }
      if (nums) {
        const auto [q, m] = float_divmod(a.get_float(), b.get_float());
        return Value::number(op == BinaryOp::Mod ? m : q);
      }
      if (op == BinaryOp::Mod && a.is_string()) return Value::string(percent_format(a.get_string(), b));
      unsupported(op == BinaryOp::Mod ? "%" : "//", a, b);
    case BinaryOp::Pow:
      if (ints) return int_pow(a.get_int(), b.get_int());
      if (nums) {
        if (a.get_float() == 0 && b.get_float() < 0) throw BuiltinError("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(a.get_float(), b.get_float()));
      }
      unsupported("**", a, b);
    case BinaryOp::Concat:
      return Value::string(to_str(a) + to_str(b));
  }
  unsupported("?", a, b);
}

Value negate(const Value& v) {
  if (is_integral(v)) {
    if (v.get_int() == INT64_MIN) overflow();
    return Value::integer(-v.get_int());
  }
  if (v.is_float()) return Value::number(-v.get_float());
  throw BuiltinError("bad operand type for unary -: '" + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
  if (is_integral(v)) return Value::integer(v.get_int());
  if (v.is_float()) return v;
  throw BuiltinError("bad operand type for unary +: '" + type_name(v) + "'");
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string())
        throw BuiltinError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.get_string().find(item.get_string()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const Value& e : container.get_list())
        if (equals(e, item)) return true;
      return false;
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      return container.get_dict().find(item) != nullptr;
    case Value::Kind::Undefined:
      return false;
    default:
      throw BuiltinError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      if (!is_integral(key)) {
        if (key.is_string()) return get_attr(obj, key.get_string());
        return Value::undefined();
      }
      const List& items = obj.get_list();
      int64_t i = key.get_int();
      if (i < 0) i += int64_t(items.size());
      if (i < 0 || i >= int64_t(items.size())) return Value::undefined("list index " + std::to_string(key.get_int()));
      return items[size_t(i)];
    }
    case Value::Kind::String: {
      if (!is_integral(key)) return key.is_string() ? find_method(obj, key.get_string()) : Value::undefined();
      const std::u32string s = unicode::decode(obj.get_string());
      int64_t i = key.get_int();
      if (i < 0) i += int64_t(s.size());
      if (i < 0 || i >= int64_t(s.size())) return Value::undefined("string index " + std::to_string(key.get_int()));
      std::string out;
      unicode::append_utf8(out, s[size_t(i)]);
      return Value::string(std::move(out));
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      if (const Value* v = obj.get_dict().find(key)) return *v;
      if (key.is_string() && obj.is_dict()) return find_method(obj, key.get_string());
      return Value::undefined(key.is_string() ? key.get_string() : repr(key));
    }
    default:
      return Value::undefined(key.is_string() ? key.get_string() : to_str(key));
  }
}

Value get_attr(const Value& obj, std::string_view name) {
  if (obj.is_dict() || obj.is_namespace()) {
    if (obj.is_dict()) {
      Value m = find_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = obj.get_dict().find(name)) return *v;
    return Value::undefined(std::string(name));
  }
  if (obj.is_string() || obj.is_sequence()) {
    Value m = find_method(obj, name);
    if (!m.is_undefined()) return m;
  }
  return Value::undefined(std::string(name));
}

Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step) {
  if (obj.is_string()) {
    const std::u32string s = unicode::decode(obj.get_string());
    std::u32string out;
    for (const int64_t i : slice_positions(int64_t(s.size()), start, stop, step)) out += s[size_t(i)];
    return Value::string(unicode::encode(out));
  }
  if (obj.is_sequence()) {
    const List& items = obj.get_list();
    List out;
    for (const int64_t i : slice_positions(int64_t(items.size()), start, stop, step)) out.push_back(items[size_t(i)]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (obj.is_undefined()) return obj;
  throw BuiltinError("'" + type_name(obj) + "' object is not subscriptable");
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return v.get_list();
    case Value::Kind::Dict: {
      List keys;
      keys.reserve(v.get_dict().size());
      for (const auto& [k, val] : v.get_dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      for (const char32_t c : unicode::decode(v.get_string())) {
        std::string s;
        unicode::append_utf8(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    case Value::Kind::Undefined:
      return {};
    default:
      throw BuiltinError("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::String: return int64_t(unicode::length(v.get_string()));
    case Value::Kind::List:
    case Value::Kind::Tuple: return int64_t(v.get_list().size());
    case Value::Kind::Dict: return int64_t(v.get_dict().size());
    case Value::Kind::Undefined: return 0;
    default: throw BuiltinError("object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace kimi::jinja
