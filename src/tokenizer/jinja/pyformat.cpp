#include "tokenizer/jinja/pyformat.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace kimi::jinja {

namespace {
// Containers nested deeper than this (possible only through self-reference) are refused.
constexpr int kMaxDepth = 512;

void check_depth(int depth) {
  if (depth > kMaxDepth) throw BuiltinError("value is nested too deeply (over 512 levels) to be written out");
}

void append_hex(std::string& out, uint32_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out += kHex[(v >> (4 * i)) & 0xF];
}

// Python's str.isprintable(), approximated for the categories text actually contains.
bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c < 0xA1) || c == 0xAD) return false;
  if (c >= 0x2000 && c <= 0x200F) return false;
  if (c >= 0x2028 && c <= 0x202F) return false;
  if (c >= 0x205F && c <= 0x2064) return false;
  if (c == 0x1680 || c == 0x3000 || c == 0xFEFF || c == 0xFFFE || c == 0xFFFF) return false;
  if (c >= 0xD800 && c <= 0xF8FF) return false;  // surrogates, private use
  return true;
}

void repr_into(std::string& out, const Value& v, int depth);

void repr_sequence(std::string& out, const List& items, char open, char close, bool tuple, int depth) {
  out += open;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    repr_into(out, items[i], depth + 1);
  }
  if (tuple && items.size() == 1) out += ',';
  out += close;
}

void repr_dict(std::string& out, const Dict& d, int depth) {
  out += '{';
  bool first = true;
  for (const auto& [k, val] : d.entries) {
    if (!first) out += ", ";
    first = false;
    repr_into(out, k, depth + 1);
    out += ": ";
    repr_into(out, val, depth + 1);
  }
  out += '}';
}

void repr_into(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::String:
      out += string_repr(v.get_string());
      return;
    case Value::Kind::List:
      repr_sequence(out, v.get_list(), '[', ']', false, depth);
      return;
    case Value::Kind::Tuple:
      repr_sequence(out, v.get_list(), '(', ')', true, depth);
      return;
    case Value::Kind::Dict:
      repr_dict(out, v.get_dict(), depth);
      return;
    case Value::Kind::Namespace:
      out += "<Namespace ";
      repr_dict(out, v.get_dict(), depth);
      out += '>';
      return;
    default:
      out += to_str(v);
  }
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  const bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return uint8_t(c) < 0x80; });
  const auto put = [&](char32_t c) {
    switch (c) {
      case '"': out += "\\\""; return;
      case '\\': out += "\\\\"; return;
      case '\n': out += "\\n"; return;
      case '\r': out += "\\r"; return;
      case '\t': out += "\\t"; return;
      case '\b': out += "\\b"; return;
      case '\f': out += "\\f"; return;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {  // UTF-16 surrogate pair, as Python writes it
        const char32_t u = c - 0x10000;
        out += "\\u";
        append_hex(out, 0xD800 + (u >> 10), 4);
        out += "\\u";
        append_hex(out, 0xDC00 + (u & 0x3FF), 4);
      } else {
        out += "\\u";
        append_hex(out, c, 4);
      }
      return;
    }
    unicode::append_utf8(out, c);
  };
  if (ascii) {
    for (const char c : s) put(char32_t(c));
  } else {
    for (const char32_t c : unicode::decode(s)) put(c);
  }
  out += '"';
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.get_string();
    case Value::Kind::Bool: return k.get_bool() ? "true" : "false";
    case Value::Kind::Int: return std::to_string(k.get_int());
    case Value::Kind::Float: return float_repr(k.get_float());
    case Value::Kind::None: return "null";
    default: throw BuiltinError("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void json_into(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  check_depth(depth);
  const auto newline = [&](int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.get_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.get_int()); return;
    case Value::Kind::Float: {
      const double d = v.get_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(d);
      return;
    }
    case Value::Kind::String: json_string(out, v.get_string(), o.ensure_ascii); return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const List& items = v.get_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(depth + 1);
        json_into(out, items[i], o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      const Dict& d = v.get_dict();
      if (d.size() == 0) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      entries.reserve(d.size());
      for (const auto& [k, val] : d.entries) {
        if (o.sort_keys && !k.is_string()) throw BuiltinError("tojson(sort_keys=true) needs string keys");
        entries.emplace_back(json_key(k), &val);
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(depth + 1);
        json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_separator;
        json_into(out, *entries[i].second, o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += '}';
      return;
    }
    default:
      throw BuiltinError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}
}  // namespace

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Function: return "function";
  }
  return "object";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, then Python's layout: positional for exponents -4..15,
  // scientific ("1e+16", "1.5e-05") outside that.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exp10 = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (const char c : mantissa)
    if (c != '.') digits += c;
  std::string out = negative ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 >= 0) {
      const auto int_len = size_t(exp10) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out.append(digits, 0, int_len);
        out += '.';
        out.append(digits, int_len, std::string::npos);
      }
    } else {
      out += "0.";
      out.append(size_t(-exp10 - 1), '0');
      out += digits;
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  out += ebuf;
  return out;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char32_t c : unicode::decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      if (c <= 0xFF) {
        out += "\\x";
        append_hex(out, c, 2);
      } else if (c <= 0xFFFF) {
        out += "\\u";
        append_hex(out, c, 4);
      } else {
        out += "\\U";
        append_hex(out, c, 8);
      }
    } else {
      unicode::append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.get_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.get_int());
    case Value::Kind::Float: return float_repr(v.get_float());
    case Value::Kind::String: return v.get_string();
    case Value::Kind::Function: return "<function " + v.get_function().name + ">";
    default: return repr(v);
  }
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_into(out, v, options, 0);
  return out;
}

}  // namespace kimi::jinja
