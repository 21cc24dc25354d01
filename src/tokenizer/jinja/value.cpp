#include "tokenizer/jinja/value.h"

#include <cmath>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pyformat.h"

namespace kimi::jinja {

namespace {
// JSON deeper than this is refused rather than converted recursively (stack safety).
constexpr int kMaxJsonDepth = 512;

template <class Json>
Value convert(const Json& j, int depth) {
  if (depth > kMaxJsonDepth) throw kimi::Error("template input is nested too deeply (over 512 levels)");
  switch (j.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return Value::none();
    case Json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      // Python ints are unbounded; ours are 64-bit, so the rare larger value becomes a float.
      return u <= uint64_t(INT64_MAX) ? Value::integer(int64_t(u)) : Value::number(double(u));
    }
    case Json::value_t::number_float:
      return Value::number(j.template get<double>());
    case Json::value_t::string:
      return Value::string(j.template get<std::string>());
    case Json::value_t::binary:
      throw kimi::Error("template input holds binary JSON data, which templates cannot use");
    case Json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e, depth + 1));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->set(std::string_view(it.key()), convert(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
  }
  return Value::none();
}
}  // namespace

Value Value::undefined(std::string name) {
  Value v;
  v.data_ = std::move(name);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  v.data_ = std::monostate{};
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.data_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.data_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.data_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.data_ = std::move(s);
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.data_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::dict() { return dict(std::make_shared<Dict>()); }

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.data_ = std::move(d);
  return v;
}

Value Value::namespace_object(std::shared_ptr<Dict> attributes) {
  Value v = dict(std::move(attributes));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::function(std::shared_ptr<const Function> f) {
  Value v;
  v.kind_ = Kind::Function;
  v.data_ = std::move(f);
  return v;
}

Value Value::from_json(const nlohmann::json& j) { return convert(j, 0); }
Value Value::from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

double Value::get_float() const {
  if (kind_ == Kind::Float) return std::get<double>(data_);
  return double(get_int());
}

const void* Value::identity() const {
  if (auto* l = std::get_if<std::shared_ptr<List>>(&data_)) return l->get();
  if (auto* d = std::get_if<std::shared_ptr<Dict>>(&data_)) return d->get();
  if (auto* f = std::get_if<std::shared_ptr<const Function>>(&data_)) return f->get();
  return nullptr;
}

void check_no_cycle(const Value& container, const Value& stored, std::string_view operation) {
  const void* target = container.identity();
  if (!target) return;
  std::vector<const Value*> pending = {&stored};
  std::unordered_set<const void*> seen;
  while (!pending.empty()) {
    const Value* v = pending.back();
    pending.pop_back();
    const void* id = v->identity();
    if (!id) continue;
    if (id == target)
      throw BuiltinError(std::string(operation) + ": the " + type_name(container) +
                         " would contain itself (reference cycles are not supported)");
    if (!seen.insert(id).second) continue;
    if (v->is_sequence()) {
      for (const Value& item : v->get_list()) pending.push_back(&item);
    } else if (v->is_dict() || v->is_namespace()) {
      for (const auto& [key, value] : v->get_dict().entries) {
        pending.push_back(&key);
        pending.push_back(&value);
      }
    } else if (v->is_function()) {
      pending.push_back(&v->get_function().captured);
    }
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return get_bool();
    case Kind::Int:
      return get_int() != 0;
    case Kind::Float:
      return get_float() != 0.0;
    case Kind::String:
      return !get_string().empty();
    case Kind::List:
    case Kind::Tuple:
      return !get_list().empty();
    case Kind::Dict:
      return get_dict().size() > 0;
    case Kind::Namespace:
    case Kind::Function:
      return true;
  }
  return false;
}

namespace {
// tag + text, built by appending (GCC 12 misreports "literal" + std::string under -Wrestrict).
std::string tagged(char tag, std::string_view text) {
  std::string k;
  k.reserve(text.size() + 1);
  k += tag;
  k += text;
  return k;
}
}  // namespace

std::string hash_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::String:
      return tagged('s', key.get_string());
    case Value::Kind::Bool:
    case Value::Kind::Int:
      return tagged('n', std::to_string(key.get_int()));
    case Value::Kind::Float: {
      // 1.0 and 1 are the same key in Python.
      const double d = key.get_float();
      if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18) return tagged('n', std::to_string(int64_t(d)));
      return tagged('f', float_repr(d));
    }
    case Value::Kind::None:
      return "N";
    case Value::Kind::Tuple: {
      std::string k = "t(";
      for (const Value& e : key.get_list()) k += hash_key(e) + ",";
      return k + ")";
    }
    default:
      throw BuiltinError("unhashable type: '" + type_name(key) + "'");
  }
}

const Value* Dict::find(const Value& key) const {
  if (!key.is_string() && !key.is_numeric() && !key.is_none() && !key.is_tuple()) return nullptr;
  const auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &entries[it->second].second;
}

const Value* Dict::find(std::string_view key) const {
  const auto it = index_.find(tagged('s', key));
  return it == index_.end() ? nullptr : &entries[it->second].second;
}

void Dict::set(const Value& key, Value v) {
  auto [it, inserted] = index_.try_emplace(hash_key(key), entries.size());
  if (inserted) entries.emplace_back(key, std::move(v));
  else entries[it->second].second = std::move(v);
}

void Dict::set(std::string_view key, Value v) { set(Value::string(std::string(key)), std::move(v)); }

bool Dict::erase(const Value& key) {
  const auto it = index_.find(hash_key(key));
  if (it == index_.end()) return false;
  entries.erase(entries.begin() + std::ptrdiff_t(it->second));
  reindex();
  return true;
}

void Dict::reindex() {
  index_.clear();
  for (size_t i = 0; i < entries.size(); ++i) index_.emplace(hash_key(entries[i].first), i);
}

}  // namespace kimi::jinja
