#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pyformat.h"

namespace kimi::jinja {

BoundArgs::BoundArgs(const CallArgs& args, std::string_view function, std::initializer_list<std::string_view> params)
    : function_(function), params_(params), slots_(params.size(), nullptr) {
  if (args.positional.size() > params_.size())
    throw BuiltinError(function_ + "() takes at most " + std::to_string(params_.size()) + " argument(s), " +
                       std::to_string(args.positional.size()) + " given");
  for (size_t i = 0; i < args.positional.size(); ++i) slots_[i] = &args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    const auto it = std::find(params_.begin(), params_.end(), name);
    if (it == params_.end()) throw BuiltinError(function_ + "() got an unexpected keyword argument '" + name + "'");
    const auto i = size_t(it - params_.begin());
    if (slots_[i]) throw BuiltinError(function_ + "() got multiple values for argument '" + name + "'");
    slots_[i] = &value;
  }
}

int64_t BoundArgs::int_or(size_t i, int64_t fallback) const {
  if (!slots_[i]) return fallback;
  const Value& v = *slots_[i];
  if (v.is_int() || v.is_bool()) return v.get_int();
  throw BuiltinError(function_ + "(): argument '" + std::string(params_[i]) + "' must be an integer, not " + type_name(v));
}

std::string BoundArgs::string_or(size_t i, std::string fallback) const {
  if (!slots_[i]) return fallback;
  const Value& v = *slots_[i];
  if (v.is_string()) return v.get_string();
  throw BuiltinError(function_ + "(): argument '" + std::string(params_[i]) + "' must be a string, not " + type_name(v));
}

}  // namespace kimi::jinja
