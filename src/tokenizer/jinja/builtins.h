#pragma once
// The builtin library: filters (filters.cpp), tests (tests_builtin.cpp), methods of str/list/dict
// (methods.cpp) and global functions (globals.cpp), plus the argument binding they share.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace kimi::jinja {

using FilterFn = Value (*)(Runtime&, const Value& input, CallArgs& args);
using TestFn = bool (*)(Runtime&, const Value& input, CallArgs& args);

FilterFn find_filter(std::string_view name);  // nullptr when there is no such filter
TestFn find_test(std::string_view name);      // nullptr when there is no such test
// `obj.name` as a bound method of str, list or dict; undefined when the type has no such method.
Value find_method(const Value& obj, std::string_view name);
// range, dict, namespace, raise_exception, strftime_now, ...
void add_builtin_globals(Dict& globals);
// Python's `fmt % args` for the conversions templates use (%s %r %d %i %f %x %%).
std::string percent_format(const std::string& fmt, const Value& args);

// Binds a builtin's arguments to its parameter list the way Python does: positionals fill the
// parameters in order, keywords by name; extra or unknown arguments are errors naming `function`.
class BoundArgs {
 public:
  BoundArgs(const CallArgs& args, std::string_view function, std::initializer_list<std::string_view> params);

  const Value* get(size_t i) const { return slots_[i]; }
  bool has(size_t i) const { return slots_[i] != nullptr; }
  Value value_or(size_t i, Value fallback) const { return slots_[i] ? *slots_[i] : std::move(fallback); }
  int64_t int_or(size_t i, int64_t fallback) const;
  bool bool_or(size_t i, bool fallback) const { return slots_[i] ? slots_[i]->truthy() : fallback; }
  std::string string_or(size_t i, std::string fallback) const;
  const std::string& function() const { return function_; }

 private:
  std::string function_;
  std::vector<std::string_view> params_;
  std::vector<const Value*> slots_;
};

}  // namespace kimi::jinja
