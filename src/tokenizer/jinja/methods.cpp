// Methods templates call on values: str (strip, split, startswith, ...), list (append, pop, ...)
// and dict (items, get, ...), following Python. Also Python's two string formatting forms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pyformat.h"
#include "tokenizer/jinja/strings.h"
#include "tokenizer/jinja/unicode.h"

namespace kimi::jinja {

namespace {

using MethodFn = Value (*)(const Value& self, CallArgs& a);

std::optional<std::string> opt_string(const BoundArgs& b, size_t i) {
  if (!b.has(i) || b.get(i)->is_none()) return std::nullopt;
  if (!b.get(i)->is_string()) throw BuiltinError(b.function() + "(): expected a string, not " + type_name(*b.get(i)));
  return b.get(i)->get_string();
}

std::optional<int64_t> opt_int(const BoundArgs& b, size_t i) {
  if (!b.has(i) || b.get(i)->is_none()) return std::nullopt;
  return b.int_or(i, 0);
}

Value string_list(std::vector<std::string> parts) {
  List out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

const std::string& str(const Value& self) { return self.get_string(); }

// ---- str ----

Value s_strip_impl(const Value& self, CallArgs& a, const char* name, bool left, bool right) {
  const BoundArgs b(a, name, {"chars"});
  return Value::string(pystr::strip(str(self), opt_string(b, 0), left, right));
}
Value s_strip(const Value& self, CallArgs& a) { return s_strip_impl(self, a, "strip", true, true); }
Value s_lstrip(const Value& self, CallArgs& a) { return s_strip_impl(self, a, "lstrip", true, false); }
Value s_rstrip(const Value& self, CallArgs& a) { return s_strip_impl(self, a, "rstrip", false, true); }

Value s_split(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "split", {"sep", "maxsplit"});
  return string_list(pystr::split(str(self), opt_string(b, 0), b.int_or(1, -1)));
}

Value s_rsplit(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "rsplit", {"sep", "maxsplit"});
  return string_list(pystr::rsplit(str(self), opt_string(b, 0), b.int_or(1, -1)));
}

Value s_splitlines(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "splitlines", {"keepends"});
  return string_list(pystr::splitlines(str(self), b.bool_or(0, false)));
}

// startswith/endswith: the prefix may be a tuple of alternatives; start/end slice the subject.
Value s_affix(const Value& self, CallArgs& a, bool prefix) {
  const BoundArgs b(a, prefix ? "startswith" : "endswith", {"affix", "start", "end"});
  if (!b.has(0)) throw BuiltinError(b.function() + "() takes at least 1 argument");
  std::string subject = str(self);
  if (b.has(1) || b.has(2)) subject = slice(self, opt_int(b, 1), opt_int(b, 2), std::nullopt).get_string();
  const auto test = [&](const Value& v) {
    if (!v.is_string()) throw BuiltinError(b.function() + "() arguments must be str or a tuple of str, not " + type_name(v));
    const std::string& x = v.get_string();
    if (x.size() > subject.size()) return false;
    return prefix ? subject.compare(0, x.size(), x) == 0 : subject.compare(subject.size() - x.size(), x.size(), x) == 0;
  };
  const Value& arg = *b.get(0);
  if (arg.is_sequence()) return Value::boolean(std::any_of(arg.get_list().begin(), arg.get_list().end(), test));
  return Value::boolean(test(arg));
}
Value s_startswith(const Value& self, CallArgs& a) { return s_affix(self, a, true); }
Value s_endswith(const Value& self, CallArgs& a) { return s_affix(self, a, false); }

Value s_upper(const Value& self, CallArgs& a) { (void)BoundArgs(a, "upper", {}); return Value::string(unicode::upper(str(self))); }
Value s_lower(const Value& self, CallArgs& a) { (void)BoundArgs(a, "lower", {}); return Value::string(unicode::lower(str(self))); }
Value s_title(const Value& self, CallArgs& a) { (void)BoundArgs(a, "title", {}); return Value::string(pystr::title(str(self))); }
Value s_capitalize(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "capitalize", {});
  return Value::string(pystr::capitalize(str(self)));
}
Value s_swapcase(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "swapcase", {});
  return Value::string(pystr::swapcase(str(self)));
}

Value s_replace(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "replace", {"old", "new", "count"});
  if (!b.has(0) || !b.has(1)) throw BuiltinError("replace() needs 'old' and 'new'");
  return Value::string(pystr::replace(str(self), b.string_or(0, ""), b.string_or(1, ""), b.int_or(2, -1)));
}

Value s_find_impl(const Value& self, CallArgs& a, const char* name, bool reverse, bool raise) {
  const BoundArgs b(a, name, {"sub", "start", "end"});
  if (!b.has(0)) throw BuiltinError(std::string(name) + "() takes at least 1 argument");
  const int64_t r = pystr::find(str(self), b.string_or(0, ""), opt_int(b, 1), opt_int(b, 2), reverse);
  if (r < 0 && raise) throw BuiltinError("substring not found");
  return Value::integer(r);
}
Value s_find(const Value& self, CallArgs& a) { return s_find_impl(self, a, "find", false, false); }
Value s_rfind(const Value& self, CallArgs& a) { return s_find_impl(self, a, "rfind", true, false); }
Value s_index(const Value& self, CallArgs& a) { return s_find_impl(self, a, "index", false, true); }
Value s_rindex(const Value& self, CallArgs& a) { return s_find_impl(self, a, "rindex", true, true); }

Value s_count(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "count", {"sub", "start", "end"});
  if (!b.has(0)) throw BuiltinError("count() takes at least 1 argument");
  std::string subject = str(self);
  if (b.has(1) || b.has(2)) subject = slice(self, opt_int(b, 1), opt_int(b, 2), std::nullopt).get_string();
  return Value::integer(pystr::count(subject, b.string_or(0, "")));
}

Value s_join(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "join", {"iterable"});
  if (!b.has(0)) throw BuiltinError("join() takes exactly one argument");
  std::string out;
  bool first = true;
  for (const Value& v : iterate(*b.get(0))) {
    if (!v.is_string()) throw BuiltinError("sequence item: expected str instance, " + type_name(v) + " found");
    if (!first) out += str(self);
    first = false;
    out += v.get_string();
  }
  return Value::string(std::move(out));
}

template <bool (*Pred)(char32_t)>
Value s_is(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "is*", {});
  return Value::boolean(pystr::is_all(str(self), Pred));
}
Value s_isupper(const Value& self, CallArgs& a) { (void)BoundArgs(a, "isupper", {}); return Value::boolean(pystr::is_upper(str(self))); }
Value s_islower(const Value& self, CallArgs& a) { (void)BoundArgs(a, "islower", {}); return Value::boolean(pystr::is_lower(str(self))); }

Value s_pad_impl(const Value& self, CallArgs& a, const char* name, int align) {
  const BoundArgs b(a, name, {"width", "fillchar"});
  const std::string fill = b.string_or(1, " ");
  const std::u32string f = unicode::decode(fill);
  if (f.size() != 1) throw BuiltinError(std::string(name) + "(): the fill character must be exactly one character long");
  return Value::string(pystr::pad(str(self), b.int_or(0, 0), f[0], align));
}
Value s_ljust(const Value& self, CallArgs& a) { return s_pad_impl(self, a, "ljust", -1); }
Value s_rjust(const Value& self, CallArgs& a) { return s_pad_impl(self, a, "rjust", 1); }
Value s_center(const Value& self, CallArgs& a) { return s_pad_impl(self, a, "center", 0); }

Value s_zfill(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "zfill", {"width"});
  std::string s = str(self);
  const int64_t width = b.int_or(0, 0);
  pystr::check_width(width);
  const auto len = int64_t(unicode::length(s));
  if (width <= len) return Value::string(s);
  const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
  s.insert(sign ? 1 : 0, std::string(size_t(width - len), '0'));
  return Value::string(std::move(s));
}

Value s_partition_impl(const Value& self, CallArgs& a, bool reverse) {
  const BoundArgs b(a, reverse ? "rpartition" : "partition", {"sep"});
  const std::string sep = b.string_or(0, "");
  if (sep.empty()) throw BuiltinError("empty separator");
  const std::string& s = str(self);
  const size_t hit = reverse ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    if (reverse) return Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    return Value::tuple({Value::string(s), Value::string(""), Value::string("")});
  }
  return Value::tuple({Value::string(s.substr(0, hit)), Value::string(sep), Value::string(s.substr(hit + sep.size()))});
}
Value s_partition(const Value& self, CallArgs& a) { return s_partition_impl(self, a, false); }
Value s_rpartition(const Value& self, CallArgs& a) { return s_partition_impl(self, a, true); }

Value s_removeprefix(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "removeprefix", {"prefix"});
  const std::string p = b.string_or(0, "");
  const std::string& s = str(self);
  return Value::string(s.compare(0, p.size(), p) == 0 && p.size() <= s.size() ? s.substr(p.size()) : s);
}

Value s_removesuffix(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "removesuffix", {"suffix"});
  const std::string p = b.string_or(0, "");
  const std::string& s = str(self);
  if (!p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
    return Value::string(s.substr(0, s.size() - p.size()));
  return Value::string(s);
}

// str.format with "{}", "{0}", "{name}", "{!r}" and "{{"/"}}"; format specs are not supported.
Value s_format(const Value& self, CallArgs& a) {
  const std::string& f = str(self);
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      else throw BuiltinError("format(): single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) throw BuiltinError("format(): single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    bool use_repr = false;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      const std::string conv = field.substr(bang + 1);
      if (conv != "r" && conv != "s") throw BuiltinError("format(): unknown conversion '!" + conv + "'");
      use_repr = conv == "r";
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos) throw BuiltinError("format(): format specs (':...') are not supported");
    Value v;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t idx = field.empty() ? auto_index++ : size_t(std::stoul(field.substr(0, 9)));
      if (idx >= a.positional.size()) throw BuiltinError("format(): replacement index " + std::to_string(idx) + " out of range");
      v = a.positional[idx];
    } else {
      const auto it = std::find_if(a.keyword.begin(), a.keyword.end(), [&](const auto& kv) { return kv.first == field; });
      if (it == a.keyword.end()) throw BuiltinError("format(): no argument named '" + field + "'");
      v = it->second;
    }
    out += use_repr ? repr(v) : to_str(v);
  }
  return Value::string(std::move(out));
}

// ---- list ----

Value l_append(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "append", {"object"});
  if (!b.has(0)) throw BuiltinError("append() takes exactly one argument");
  check_no_cycle(self, *b.get(0), "append()");
  self.get_list().push_back(*b.get(0));
  return Value::none();
}

Value l_extend(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "extend", {"iterable"});
  if (!b.has(0)) throw BuiltinError("extend() takes exactly one argument");
  List items = iterate(*b.get(0));
  for (const Value& item : items) check_no_cycle(self, item, "extend()");
  self.get_list().insert(self.get_list().end(), items.begin(), items.end());
  return Value::none();
}

Value l_insert(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "insert", {"index", "object"});
  if (!b.has(1)) throw BuiltinError("insert() takes exactly 2 arguments");
  List& l = self.get_list();
  int64_t i = b.int_or(0, 0);
  const auto n = int64_t(l.size());
  if (i < 0) i = std::max<int64_t>(0, i + n);
  i = std::min(i, n);
  check_no_cycle(self, *b.get(1), "insert()");
  l.insert(l.begin() + i, *b.get(1));
  return Value::none();
}

Value l_pop(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "pop", {"index"});
  List& l = self.get_list();
  if (l.empty()) throw BuiltinError("pop from empty list");
  int64_t i = b.int_or(0, -1);
  if (i < 0) i += int64_t(l.size());
  if (i < 0 || i >= int64_t(l.size())) throw BuiltinError("pop index out of range");
  Value v = l[size_t(i)];
  l.erase(l.begin() + i);
  return v;
}

Value l_remove(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "remove", {"value"});
  if (!b.has(0)) throw BuiltinError("remove() takes exactly one argument");
  List& l = self.get_list();
  const auto it = std::find_if(l.begin(), l.end(), [&](const Value& v) { return equals(v, *b.get(0)); });
  if (it == l.end()) throw BuiltinError("list.remove(x): x not in list");
  l.erase(it);
  return Value::none();
}

Value l_clear(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "clear", {});
  self.get_list().clear();
  return Value::none();
}

Value l_reverse(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "reverse", {});
  std::reverse(self.get_list().begin(), self.get_list().end());
  return Value::none();
}

Value l_copy(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "copy", {});
  return Value::list(self.get_list());
}

Value l_index(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "index", {"value"});
  if (!b.has(0)) throw BuiltinError("index() takes at least 1 argument");
  const List& l = self.get_list();
  for (size_t i = 0; i < l.size(); ++i)
    if (equals(l[i], *b.get(0))) return Value::integer(int64_t(i));
  throw BuiltinError(repr(*b.get(0)) + " is not in list");
}

Value l_count(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "count", {"value"});
  if (!b.has(0)) throw BuiltinError("count() takes exactly one argument");
  const List& l = self.get_list();
  return Value::integer(std::count_if(l.begin(), l.end(), [&](const Value& v) { return equals(v, *b.get(0)); }));
}

// ---- dict ----

Value d_items(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "items", {});
  List out;
  for (const auto& [k, v] : self.get_dict().entries) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}

Value d_keys(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "keys", {});
  List out;
  for (const auto& [k, v] : self.get_dict().entries) out.push_back(k);
  return Value::list(std::move(out));
}

Value d_values(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "values", {});
  List out;
  for (const auto& [k, v] : self.get_dict().entries) out.push_back(v);
  return Value::list(std::move(out));
}

Value d_get(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "get", {"key", "default"});
  if (!b.has(0)) throw BuiltinError("get() takes at least 1 argument");
  const Value* v = self.get_dict().find(*b.get(0));
  return v ? *v : b.value_or(1, Value::none());
}

Value d_pop(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "pop", {"key", "default"});
  if (!b.has(0)) throw BuiltinError("pop() takes at least 1 argument");
  Dict& d = self.get_dict();
  if (const Value* v = d.find(*b.get(0))) {
    Value out = *v;
    d.erase(*b.get(0));
    return out;
  }
  if (b.has(1)) return *b.get(1);
  throw BuiltinError("key " + repr(*b.get(0)) + " not found");
}

Value d_setdefault(const Value& self, CallArgs& a) {
  const BoundArgs b(a, "setdefault", {"key", "default"});
  if (!b.has(0)) throw BuiltinError("setdefault() takes at least 1 argument");
  Dict& d = self.get_dict();
  if (const Value* v = d.find(*b.get(0))) return *v;
  check_no_cycle(self, b.value_or(1, Value::none()), "setdefault()");
  d.set(*b.get(0), b.value_or(1, Value::none()));
  return b.value_or(1, Value::none());
}

Value d_update(const Value& self, CallArgs& a) {
  if (a.positional.size() > 1) throw BuiltinError("update() takes at most 1 positional argument");
  Dict& d = self.get_dict();
  if (!a.positional.empty()) {
    const Value& other = a.positional[0];
    if (!other.is_dict()) throw BuiltinError("update() expects a mapping, got " + type_name(other));
    const auto entries = other.get_dict().entries;  // copy: `d.update(d)` is allowed
    for (const auto& [k, v] : entries) check_no_cycle(self, v, "update()");
    for (const auto& [k, v] : entries) d.set(k, v);
  }
  for (const auto& [k, v] : a.keyword) check_no_cycle(self, v, "update()");
  for (const auto& [k, v] : a.keyword) d.set(std::string_view(k), v);
  return Value::none();
}

Value d_copy(const Value& self, CallArgs& a) {
  (void)BoundArgs(a, "copy", {});
  return Value::dict(std::make_shared<Dict>(self.get_dict()));
}

const std::unordered_map<std::string_view, MethodFn>& string_methods() {
  static const std::unordered_map<std::string_view, MethodFn> m = {
      {"strip", s_strip}, {"lstrip", s_lstrip}, {"rstrip", s_rstrip}, {"split", s_split}, {"rsplit", s_rsplit},
      {"splitlines", s_splitlines}, {"startswith", s_startswith}, {"endswith", s_endswith}, {"upper", s_upper},
      {"lower", s_lower}, {"casefold", s_lower}, {"title", s_title}, {"capitalize", s_capitalize},
      {"swapcase", s_swapcase}, {"replace", s_replace}, {"find", s_find}, {"rfind", s_rfind}, {"index", s_index},
      {"rindex", s_rindex}, {"count", s_count}, {"join", s_join}, {"isdigit", s_is<unicode::is_digit>},
      {"isdecimal", s_is<unicode::is_digit>}, {"isnumeric", s_is<unicode::is_digit>},
      {"isalpha", s_is<unicode::is_alpha>}, {"isalnum", s_is<unicode::is_alnum>}, {"isspace", s_is<unicode::is_space>},
      {"isupper", s_isupper}, {"islower", s_islower}, {"ljust", s_ljust}, {"rjust", s_rjust}, {"center", s_center},
      {"zfill", s_zfill}, {"partition", s_partition}, {"rpartition", s_rpartition},
      {"removeprefix", s_removeprefix}, {"removesuffix", s_removesuffix}, {"format", s_format},
  };
  return m;
}

const std::unordered_map<std::string_view, MethodFn>& list_methods() {
  static const std::unordered_map<std::string_view, MethodFn> m = {
      {"append", l_append}, {"extend", l_extend}, {"insert", l_insert}, {"pop", l_pop}, {"remove", l_remove},
      {"clear", l_clear}, {"reverse", l_reverse}, {"copy", l_copy}, {"index", l_index}, {"count", l_count},
  };
  return m;
}

const std::unordered_map<std::string_view, MethodFn>& tuple_methods() {
  static const std::unordered_map<std::string_view, MethodFn> m = {{"index", l_index}, {"count", l_count}};
  return m;
}

const std::unordered_map<std::string_view, MethodFn>& dict_methods() {
  static const std::unordered_map<std::string_view, MethodFn> m = {
      {"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get}, {"pop", d_pop},
      {"setdefault", d_setdefault}, {"update", d_update}, {"copy", d_copy},
  };
  return m;
}

std::string pad_field(std::string s, int width, bool left_align, char fill) {
  const auto len = int(unicode::length(s));
  if (width <= len) return s;
  const std::string padding(size_t(width - len), fill);
  return left_align ? s + padding : padding + s;
}

}  // namespace

Value find_method(const Value& obj, std::string_view name) {
  const std::unordered_map<std::string_view, MethodFn>* table = nullptr;
  switch (obj.kind()) {
    case Value::Kind::String: table = &string_methods(); break;
    case Value::Kind::List: table = &list_methods(); break;
    case Value::Kind::Tuple: table = &tuple_methods(); break;
    case Value::Kind::Dict: table = &dict_methods(); break;
    default: return Value::undefined(std::string(name));
  }
  const auto it = table->find(name);
  if (it == table->end()) return Value::undefined(std::string(name));
  auto f = std::make_shared<Function>();
  f->name = std::string(name);
  f->call = [self = obj, fn = it->second](CallArgs& a, Runtime&) { return fn(self, a); };
  f->captured = obj;
  return Value::function(std::move(f));
}

std::string percent_format(const std::string& fmt, const Value& args) {
  const bool mapping = args.is_dict();
  List positional;
  if (args.is_tuple()) positional = args.get_list();
  else if (!mapping) positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw BuiltinError("incomplete format");
    Value v;
    bool have_value = false;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) throw BuiltinError("format requires a mapping");
      const Value* x = args.get_dict().find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!x) throw BuiltinError("format key '" + fmt.substr(i + 1, close - i - 1) + "' not found");
      v = *x;
      have_value = true;
      i = close + 1;
    }
    bool left = false, zero = false, plus = false, space = false;
    for (; i < fmt.size() && std::string_view("-0+ #").find(fmt[i]) != std::string_view::npos; ++i) {
      left |= fmt[i] == '-';
      zero |= fmt[i] == '0';
      plus |= fmt[i] == '+';
      space |= fmt[i] == ' ';
    }
    int width = 0, precision = -1;
    for (; i < fmt.size() && std::isdigit(uint8_t(fmt[i])); ++i) width = std::min(width * 10 + (fmt[i] - '0'), 10000);
    if (i < fmt.size() && fmt[i] == '.') {
      precision = 0;
      for (++i; i < fmt.size() && std::isdigit(uint8_t(fmt[i])); ++i) precision = std::min(precision * 10 + (fmt[i] - '0'), 300);
    }
    if (i >= fmt.size()) throw BuiltinError("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have_value) {
      if (mapping) throw BuiltinError("format requires a mapping");
      if (next >= positional.size()) throw BuiltinError("not enough arguments for format string");
      v = positional[next++];
    }
    std::string flags = std::string("%") + (left ? "-" : "") + (plus ? "+" : "") + (space ? " " : "") + (zero && !left ? "0" : "");
    char buf[400];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? to_str(v) : repr(v);
        if (precision >= 0) s = unicode::encode(std::u32string_view(unicode::decode(s)).substr(0, size_t(precision)));
        out += pad_field(std::move(s), width, left, ' ');
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_numeric()) throw BuiltinError(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
        const double d = v.get_float();
        const long long n = v.is_float() ? (std::isfinite(d) && std::fabs(d) < 9.2e18 ? (long long)d : 0) : (long long)v.get_int();
        const std::string spec = flags + std::to_string(std::min(width, 300)) + "ll" + (conv == 'i' ? 'd' : conv);
        std::snprintf(buf, sizeof buf, spec.c_str(), n);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_numeric()) throw BuiltinError(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
        const std::string spec = flags + std::to_string(std::min(width, 60)) + "." + std::to_string(std::min(precision < 0 ? 6 : precision, 60)) + conv;
        std::snprintf(buf, sizeof buf, spec.c_str(), v.get_float());
        out += buf;
        break;
      }
      default:
        throw BuiltinError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!mapping && next < positional.size()) throw BuiltinError("not all arguments converted during string formatting");
  return out;
}

}  // namespace kimi::jinja
