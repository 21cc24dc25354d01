// Jinja2's builtin filters (plus Hugging Face's tojson), with Jinja2's parameter names and defaults.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pyformat.h"
#include "tokenizer/jinja/strings.h"
#include "tokenizer/jinja/unicode.h"

namespace kimi::jinja {

namespace {

const std::string& need_string(const Value& v, const char* filter) {
  if (!v.is_string()) throw BuiltinError(std::string("filter '") + filter + "' expects a string, got " + type_name(v));
  return v.get_string();
}

// Jinja2's attribute getter: "a.b.0" looks up a, then b, then index 0, each as item-then-attribute.
Value lookup_path(const Value& v, const Value& attribute) {
  if (attribute.is_int()) return get_item(v, attribute);
  const std::string path = to_str(attribute);
  Value cur = v;
  for (const std::string& part : pystr::split(path, std::string("."), -1)) {
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value::integer(std::strtoll(part.c_str(), nullptr, 10))) : get_item(cur, Value::string(part));
  }
  return cur;
}

// The sort key of the sort/dictsort/unique/min/max filters: strings fold case unless asked not to.
Value fold(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(unicode::lower(v.get_string()));
  return v;
}

Value f_abs(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "abs", {});
  if (v.is_float()) return Value::number(std::fabs(v.get_float()));
  if (v.is_numeric()) return v.get_int() < 0 ? negate(v) : Value::integer(v.get_int());
  throw BuiltinError("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "attr", {"name"});
  const std::string name = b.string_or(0, "");
  if (v.is_namespace()) {
    const Value* x = v.get_dict().find(name);
    return x ? *x : Value::undefined(name);
  }
  return find_method(v, name);  // Python getattr: methods only, never dict keys
}

Value f_batch(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "batch", {"linecount", "fill_with"});
  const int64_t n = b.int_or(0, 0);
  if (n <= 0) throw BuiltinError("batch size must be positive");
  List out, cur;
  for (Value& item : iterate(v)) {
    cur.push_back(std::move(item));
    if (int64_t(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (b.has(1) && !b.get(1)->is_none())
      while (int64_t(cur.size()) < n) cur.push_back(*b.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_capitalize(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "capitalize", {});
  return Value::string(pystr::capitalize(to_str(v)));
}

Value f_center(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "center", {"width"});
  return Value::string(pystr::pad(to_str(v), b.int_or(0, 80), ' ', 0));
}

Value f_default(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "default", {"default_value", "boolean"});
  const bool use_default = v.is_undefined() || (b.bool_or(1, false) && !v.truthy());
  return use_default ? b.value_or(0, Value::string("")) : v;
}

Value f_dictsort(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw BuiltinError("dictsort expects a mapping, got " + type_name(v));
  const bool cs = b.bool_or(0, false);
  const std::string by = b.string_or(1, "key");
  if (by != "key" && by != "value") throw BuiltinError("dictsort: 'by' must be 'key' or 'value'");
  const size_t pos = by == "key" ? 0 : 1;
  List items;
  for (const auto& [k, val] : v.get_dict().entries) items.push_back(Value::tuple({k, val}));
  const bool rev = b.bool_or(2, false);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = fold(x.get_list()[pos], cs), ky = fold(y.get_list()[pos], cs);
    return rev ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
  });
  return Value::list(std::move(items));
}

Value f_escape(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "escape", {});
  return Value::string(pystr::html_escape(to_str(v)));
}

Value f_first(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "first", {});
  if (v.is_sequence()) return v.get_list().empty() ? Value::undefined("first item") : v.get_list().front();
  List items = iterate(v);
  return items.empty() ? Value::undefined("first item") : items.front();
}

Value f_last(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "last", {});
  if (v.is_sequence()) return v.get_list().empty() ? Value::undefined("last item") : v.get_list().back();
  List items = iterate(v);
  return items.empty() ? Value::undefined("last item") : items.back();
}

// Python float(str): optional sign, digits, '.', exponent, inf/nan; surrounding whitespace allowed.
std::optional<double> parse_float(const std::string& s0) {
  std::string s = pystr::strip(s0, std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  const std::string low = unicode::lower(s);
  if (low.find('x') != std::string::npos || low.find('p') != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

Value f_float(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "float", {"default"});
  if (v.is_numeric()) return Value::number(v.get_float());
  if (v.is_string())
    if (auto d = parse_float(v.get_string())) return Value::number(*d);
  return b.value_or(0, Value::number(0.0));
}

Value f_int(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "int", {"default", "base"});
  const Value fallback = b.value_or(0, Value::integer(0));
  if (v.is_int() || v.is_bool()) return Value::integer(v.get_int());
  if (v.is_float()) {
    const double d = v.get_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::integer(int64_t(d));
  }
  if (!v.is_string()) return fallback;
  std::string s = pystr::strip(v.get_string(), std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  int64_t base = b.int_or(1, 10);
  std::string digits = s;
  bool negative = false;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    negative = digits[0] == '-';
    digits.erase(0, 1);
  }
  if (base == 16 || base == 8 || base == 2) {
    const std::string prefix = base == 16 ? "0x" : base == 8 ? "0o" : "0b";
    if (unicode::lower(digits.substr(0, 2)) == prefix) digits.erase(0, 2);
  }
  if (!digits.empty() && base >= 2 && base <= 36) {
    errno = 0;
    char* end = nullptr;
    const long long r = std::strtoll(digits.c_str(), &end, int(base));
    if (end == digits.c_str() + digits.size() && errno == 0 && std::isalnum(uint8_t(digits[0])))
      return Value::integer(negative ? -r : r);
  }
  if (auto d = parse_float(s); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value::integer(int64_t(*d));
  return fallback;
}

Value f_indent(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "indent", {"width", "first", "blank"});
  std::string indention;
  if (b.has(0) && b.get(0)->is_string()) indention = b.get(0)->get_string();
  else {
    const int64_t width = b.int_or(0, 4);
    pystr::check_width(width);
    indention = std::string(size_t(std::max<int64_t>(0, width)), ' ');
  }
  const std::string s = to_str(v) + "\n";  // Jinja2 appends a newline so a trailing one survives splitlines
  const std::vector<std::string> lines = pystr::splitlines(s, false);
  std::string out;
  if (b.bool_or(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + (lines[i].empty() ? std::string() : indention);
      out += lines[i];
    }
  }
  if (b.bool_or(1, false)) out = indention + out;
  return Value::string(std::move(out));
}

Value f_items(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "items", {});
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) throw BuiltinError("can only get item pairs from a mapping, not " + type_name(v));
  List items;
  for (const auto& [k, val] : v.get_dict().entries) items.push_back(Value::tuple({k, val}));
  return Value::list(std::move(items));
}

Value f_join(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "join", {"d", "attribute"});
  const std::string sep = b.has(0) ? to_str(*b.get(0)) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(b.has(1) ? lookup_path(item, *b.get(1)) : item);
  }
  return Value::string(std::move(out));
}

Value f_length(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "length", {});
  return Value::integer(length(v));
}

Value f_list(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "list", {});
  return Value::list(iterate(v));
}

Value f_lower(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "lower", {});
  return Value::string(unicode::lower(to_str(v)));
}

Value f_upper(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "upper", {});
  return Value::string(unicode::upper(to_str(v)));
}

Value f_map(Runtime& rt, const Value& v, CallArgs& a) {
  List out;
  const List items = iterate(v);
  if (a.positional.empty()) {  // map(attribute="x", default=...)
    const BoundArgs b(a, "map", {"attribute", "default"});
    if (!b.has(0)) throw BuiltinError("map needs a filter name or attribute=");
    for (const Value& item : items) {
      Value x = lookup_path(item, *b.get(0));
      if (x.is_undefined() && b.has(1)) x = *b.get(1);
      out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
  }
  const std::string filter = to_str(a.positional[0]);
  for (const Value& item : items) {
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    out.push_back(rt.apply_filter(filter, item, std::move(rest)));
  }
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test result equals `keep`.
Value select_impl(Runtime& rt, const Value& v, CallArgs& a, bool by_attribute, bool keep, const char* name) {
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (a.positional.empty()) throw BuiltinError(std::string(name) + " needs an attribute name");
    attribute = a.positional[next++];
  }
  std::string test;
  if (next < a.positional.size()) test = to_str(a.positional[next++]);
  List out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? lookup_path(item, attribute) : item;
    bool ok;
    if (test.empty()) {
      ok = subject.truthy();
    } else {
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + std::ptrdiff_t(next), a.positional.end());
      rest.keyword = a.keyword;
      ok = rt.apply_test(test, subject, std::move(rest));
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Runtime& rt, const Value& v, CallArgs& a) { return select_impl(rt, v, a, false, true, "select"); }
Value f_reject(Runtime& rt, const Value& v, CallArgs& a) { return select_impl(rt, v, a, false, false, "reject"); }
Value f_selectattr(Runtime& rt, const Value& v, CallArgs& a) { return select_impl(rt, v, a, true, true, "selectattr"); }
Value f_rejectattr(Runtime& rt, const Value& v, CallArgs& a) { return select_impl(rt, v, a, true, false, "rejectattr"); }

Value min_max(const Value& v, CallArgs& a, bool want_max, const char* name) {
  const BoundArgs b(a, name, {"case_sensitive", "attribute"});
  const bool cs = b.bool_or(0, false);
  const List items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("no ") + name + " item");
  const auto key = [&](const Value& x) { return fold(b.has(1) ? lookup_path(x, *b.get(1)) : x, cs); };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare(key(items[i]), key(items[best]));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_max(Runtime&, const Value& v, CallArgs& a) { return min_max(v, a, true, "max"); }
Value f_min(Runtime&, const Value& v, CallArgs& a) { return min_max(v, a, false, "min"); }

Value f_replace(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "replace", {"old", "new", "count"});
  if (!b.has(0) || !b.has(1)) throw BuiltinError("replace needs 'old' and 'new'");
  const int64_t count = b.has(2) && !b.get(2)->is_none() ? b.int_or(2, -1) : -1;
  return Value::string(pystr::replace(to_str(v), to_str(*b.get(0)), to_str(*b.get(1)), count));
}

Value f_reverse(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "reverse", {});
  if (v.is_string()) {
    std::u32string d = unicode::decode(v.get_string());
    std::reverse(d.begin(), d.end());
    return Value::string(unicode::encode(d));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "round", {"precision", "method"});
  const int64_t precision = b.int_or(0, 0);
  const std::string method = b.string_or(1, "common");
  if (method != "common" && method != "ceil" && method != "floor")
    throw BuiltinError("round: method must be 'common', 'ceil' or 'floor'");
  if (!v.is_numeric()) throw BuiltinError("round expects a number, got " + type_name(v));
  if (method == "common" && !v.is_float()) return Value::integer(v.get_int());  // Python round(int, n) stays an int
  const double x = v.get_float();
  if (method == "common") {
    // Python's round() rounds the exact binary value half-to-even; printf does the same.
    if (!std::isfinite(x) || precision > 300) return Value::number(x);
    if (precision < -300) return Value::number(0.0 * x);
    if (precision < 0) {
      const double p = std::pow(10.0, double(-precision));
      return Value::number(std::nearbyint(x / p) * p);
    }
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", int(precision), x);
    return Value::number(std::strtod(buf, nullptr));
  }
  const double p = std::pow(10.0, double(precision));
  return Value::number((method == "ceil" ? std::ceil(x * p) : std::floor(x * p)) / p);
}

Value f_safe(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "safe", {});
  return v.is_undefined() ? Value::string("") : v;
}

Value f_sort(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool cs = b.bool_or(1, false);
  List items = iterate(v);
  const auto key = [&](const Value& x) { return fold(b.has(2) ? lookup_path(x, *b.get(2)) : x, cs); };
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
  const bool rev = b.bool_or(0, false);
  // Python's sort(reverse=True) keeps equal items in their original order, so reverse the comparison.
  std::stable_sort(keyed.begin(), keyed.end(),
                   [&](const auto& x, const auto& y) { return rev ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0; });
  List out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_string(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "string", {});
  return Value::string(to_str(v));
}

Value f_sum(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "sum", {"attribute", "start"});
  Value total = b.value_or(1, Value::integer(0));
  for (const Value& item : iterate(v)) total = binary_op(BinaryOp::Add, total, b.has(0) ? lookup_path(item, *b.get(0)) : item);
  return total;
}

Value f_title(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "title", {});
  return Value::string(pystr::jinja_title(to_str(v)));
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = b.bool_or(0, false);
  o.sort_keys = b.bool_or(3, false);
  if (b.has(1) && !b.get(1)->is_none()) {
    const Value& ind = *b.get(1);
    if (ind.is_string()) o.indent = ind.get_string();
    else if (ind.is_int() || ind.is_bool()) {
      pystr::check_width(ind.get_int());
      o.indent = std::string(size_t(std::max<int64_t>(0, ind.get_int())), ' ');
    }
    else throw BuiltinError("tojson: indent must be an integer or a string");
    o.item_separator = ",";
  }
  if (b.has(2) && !b.get(2)->is_none()) {
    const Value& sep = *b.get(2);
    if (!sep.is_sequence() || sep.get_list().size() != 2 || !sep.get_list()[0].is_string() || !sep.get_list()[1].is_string())
      throw BuiltinError("tojson: separators must be a pair of strings");
    o.item_separator = sep.get_list()[0].get_string();
    o.key_separator = sep.get_list()[1].get_string();
  }
  return Value::string(to_json(v, o));
}

Value f_trim(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "trim", {"chars"});
  std::optional<std::string> chars;
  if (b.has(0) && !b.get(0)->is_none()) chars = to_str(*b.get(0));
  return Value::string(pystr::strip(to_str(v), chars, true, true));
}

Value f_truncate(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "truncate", {"length", "killwords", "end", "leeway"});
  const std::string s = to_str(v);
  const int64_t len = b.int_or(0, 255);
  const std::string end = b.string_or(2, "...");
  const int64_t leeway = b.has(3) && !b.get(3)->is_none() ? b.int_or(3, 5) : 5;
  const std::u32string d = unicode::decode(s);
  if (int64_t(d.size()) <= len + leeway) return Value::string(s);
  const int64_t keep = std::max<int64_t>(0, len - int64_t(unicode::length(end)));
  const std::string head = unicode::encode(std::u32string_view(d).substr(0, size_t(keep)));
  if (b.bool_or(1, false)) return Value::string(head + end);
  return Value::string(pystr::rsplit(head, std::string(" "), 1)[0] + end);
}

Value f_unique(Runtime&, const Value& v, CallArgs& a) {
  const BoundArgs b(a, "unique", {"case_sensitive", "attribute"});
  const bool cs = b.bool_or(0, false);
  List out, seen;
  for (const Value& item : iterate(v)) {
    const Value k = fold(b.has(1) ? lookup_path(item, *b.get(1)) : item, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Runtime&, const Value& v, CallArgs& a) {
  (void)BoundArgs(a, "wordcount", {});
  int64_t n = 0;
  bool in_word = false;
  for (const char32_t c : unicode::decode(to_str(v))) {
    const bool w = unicode::is_word(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_format(Runtime&, const Value& v, CallArgs& a) {
  if (!a.keyword.empty() && !a.positional.empty()) throw BuiltinError("format takes positional or keyword arguments, not both");
  Value args;
  if (!a.keyword.empty()) {
    auto d = std::make_shared<Dict>();
    for (auto& [k, x] : a.keyword) d->set(std::string_view(k), x);
    args = Value::dict(std::move(d));
  } else {
    args = Value::tuple(a.positional);
  }
  return Value::string(percent_format(need_string(v, "format"), args));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
      {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"format", f_format},
      {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
      {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
      {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
      {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort},
      {"string", f_string}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
  };
  const auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

}  // namespace kimi::jinja
