// Global functions every template sees: Jinja2's range/dict/namespace/joiner/cycler and Hugging
// Face's raise_exception/strftime_now.
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pyformat.h"

namespace kimi::jinja {

namespace {

// Larger ranges are refused rather than materialised (templates iterate small ranges).
constexpr int64_t kMaxRange = 10'000'000;

Value make_function(std::string name, std::function<Value(CallArgs&, Runtime&)> fn, Value captured = {}) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(fn);
  f->captured = std::move(captured);
  return Value::function(std::move(f));
}

int64_t int_arg(const Value& v, const char* fn) {
  if (v.is_int() || v.is_bool()) return v.get_int();
  throw BuiltinError(std::string(fn) + "(): '" + type_name(v) + "' object cannot be interpreted as an integer");
}

Value g_range(CallArgs& a, Runtime&) {
  if (!a.keyword.empty()) throw BuiltinError("range() takes no keyword arguments");
  const auto& p = a.positional;
  if (p.empty() || p.size() > 3) throw BuiltinError("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = int_arg(p[0], "range");
  } else {
    start = int_arg(p[0], "range");
    stop = int_arg(p[1], "range");
    if (p.size() == 3) step = int_arg(p[2], "range");
  }
  if (step == 0) throw BuiltinError("range() arg 3 must not be zero");
  // Count first (in unsigned arithmetic, which cannot overflow here) so that an oversized range
  // fails before allocating.
  const bool up = step > 0;
  const uint64_t span = up ? (stop > start ? uint64_t(stop) - uint64_t(start) : 0)
                           : (start > stop ? uint64_t(start) - uint64_t(stop) : 0);
  const uint64_t mag = up ? uint64_t(step) : uint64_t(0) - uint64_t(step);
  const uint64_t count = span / mag + (span % mag != 0);
  if (count > uint64_t(kMaxRange)) throw BuiltinError("range() is too large (over 10,000,000 items)");
  List out;
  out.reserve(size_t(count));
  int64_t v = start;
  for (uint64_t k = 0; k < count; ++k) {
    out.push_back(Value::integer(v));
    if (k + 1 < count) v += step;  // stays inside [start, stop): no overflow
  }
  return Value::list(std::move(out));
}

// dict(mapping_or_pairs, **kwargs) and namespace(...) build their contents the same way.
std::shared_ptr<Dict> build_dict(CallArgs& a, const char* fn) {
  auto d = std::make_shared<Dict>();
  if (a.positional.size() > 1) throw BuiltinError(std::string(fn) + "() takes at most 1 positional argument");
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict() || src.is_namespace()) {
      for (const auto& [k, v] : src.get_dict().entries) d->set(k, v);
    } else if (src.is_sequence()) {
      for (const Value& pair : src.get_list()) {
        if (!pair.is_sequence() || pair.get_list().size() != 2)
          throw BuiltinError(std::string(fn) + "(): sequence elements must be pairs");
        d->set(pair.get_list()[0], pair.get_list()[1]);
      }
    } else {
      throw BuiltinError(std::string(fn) + "(): cannot build from " + type_name(src));
    }
  }
  for (auto& [k, v] : a.keyword) d->set(std::string_view(k), v);
  return d;
}

Value g_dict(CallArgs& a, Runtime&) { return Value::dict(build_dict(a, "dict")); }
Value g_namespace(CallArgs& a, Runtime&) { return Value::namespace_object(build_dict(a, "namespace")); }

Value g_raise_exception(CallArgs& a, Runtime&) {
  const BoundArgs b(a, "raise_exception", {"message"});
  throw BuiltinError(b.has(0) ? to_str(*b.get(0)) : "raise_exception() called");
}

Value g_strftime_now(CallArgs& a, Runtime&) {
  const BoundArgs b(a, "strftime_now", {"format"});
  const std::string fmt = b.string_or(0, "");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(256 + fmt.size() * 8, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &local);
  buf.resize(n);
  return Value::string(std::move(buf));
}

// joiner(sep): a callable returning "" the first time and `sep` afterwards.
Value g_joiner(CallArgs& a, Runtime&) {
  const BoundArgs b(a, "joiner", {"sep"});
  const std::string sep = b.has(0) ? to_str(*b.get(0)) : ", ";
  auto used = std::make_shared<bool>(false);
  return make_function("joiner", [sep, used](CallArgs& args, Runtime&) {
    (void)BoundArgs(args, "joiner", {});
    const bool first = !*used;
    *used = true;
    return Value::string(first ? "" : sep);
  });
}

// cycler(*items): an object with next(), reset() and `current`.
Value g_cycler(CallArgs& a, Runtime&) {
  if (a.positional.empty()) throw BuiltinError("cycler() needs at least one item");
  auto state = std::make_shared<Dict>();
  auto items = std::make_shared<List>(a.positional);
  auto pos = std::make_shared<size_t>(0);
  state->set("current", (*items)[0]);
  std::weak_ptr<Dict> weak = state;  // the methods live in the dict itself: avoid an ownership cycle
  state->set("next", make_function("next", [items, pos, weak](CallArgs&, Runtime&) {
               Value v = (*items)[*pos];
               *pos = (*pos + 1) % items->size();
               if (auto s = weak.lock()) s->set("current", (*items)[*pos]);
               return v;
             },
             Value::tuple(*items)));
  state->set("reset", make_function("reset", [items, pos, weak](CallArgs&, Runtime&) {
               *pos = 0;
               if (auto s = weak.lock()) s->set("current", (*items)[0]);
               return Value::none();
             },
             Value::tuple(*items)));
  return Value::namespace_object(std::move(state));
}

}  // namespace

void add_builtin_globals(Dict& globals) {
  globals.set("range", make_function("range", g_range));
  globals.set("dict", make_function("dict", g_dict));
  globals.set("namespace", make_function("namespace", g_namespace));
  globals.set("raise_exception", make_function("raise_exception", g_raise_exception));
  globals.set("strftime_now", make_function("strftime_now", g_strftime_now));
  globals.set("joiner", make_function("joiner", g_joiner));
  globals.set("cycler", make_function("cycler", g_cycler));
}

}  // namespace kimi::jinja
