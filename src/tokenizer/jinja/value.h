#pragma once
// The interpreter's value model: Python's types as Jinja2 templates see them. Lists and dicts are
// shared by reference (as in Python), so `ns.items.append(x)` or `{% set ns.x = ... %}` is seen
// through every name that refers to the same object.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace kimi::jinja {

class Value;
class Runtime;
struct Dict;
struct Function;
using List = std::vector<Value>;

// Arguments of a call, as written: positional ones, then keyword ones in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Value {
 public:
  // The scoped enumerators share their names with the types they describe (Kind::List holds a List).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Function };
#pragma GCC diagnostic pop

  Value() = default;  // undefined
  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict();
  static Value dict(std::shared_ptr<Dict> d);
  static Value namespace_object(std::shared_ptr<Dict> attributes);
  static Value function(std::shared_ptr<const Function> f);
  // JSON null/bool/number/string/array/object -> None/bool/int or float/str/list/dict, as json.loads.
  // Dicts keep the JSON object's key order, so ordered_json keeps the document's order (as Python
  // does) while nlohmann::json (a std::map) yields keys sorted.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_function() const { return kind_ == Kind::Function; }
  // Python int/float/bool: bool is an int subclass, and arithmetic accepts it.
  bool is_numeric() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }

  bool get_bool() const { return std::get<bool>(data_); }
  int64_t get_int() const { return kind_ == Kind::Bool ? int64_t(get_bool()) : std::get<int64_t>(data_); }
  double get_float() const;  // int, bool or float as a double
  const std::string& get_string() const { return std::get<std::string>(data_); }
  const std::string& undefined_name() const { return std::get<std::string>(data_); }
  List& get_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  Dict& get_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Function& get_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  // Identity, for the `sameas` test: the shared object for containers, else null.
  const void* identity() const;

  bool truthy() const;  // Python bool(); undefined is false

 private:
  Kind kind_ = Kind::Undefined;
  std::variant<std::string, std::monostate, bool, int64_t, double, std::shared_ptr<List>, std::shared_ptr<Dict>,
               std::shared_ptr<const Function>>
      data_;
};

// A dict keyed by hashable values (str, int, float, bool, None, tuples of these) in insertion order.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
  void set(std::string_view key, Value v);
  bool erase(const Value& key);
  size_t size() const { return entries.size(); }

 private:
  std::unordered_map<std::string, size_t> index_;
  void reindex();
};

// Something callable from a template: a builtin, a bound method, a macro or a registered global.
struct Function {
  std::string name;
  std::function<Value(CallArgs&, Runtime&)> call;
  Value captured;  // what the callable holds: a bound method's object, a cycler's items; else undefined
};

// Containers are reference counted, so a container that holds itself would never be freed. Python
// collects such cycles; templates never need them, so the methods that store into an existing
// container (append, insert, extend, update, setdefault, `set ns.attr`) refuse a value from which
// `container` is reachable, through containers and bound methods. Linear in what `stored` reaches.
void check_no_cycle(const Value& container, const Value& stored, std::string_view operation);

// What builtins may ask of the interpreter while they run.
class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual Value call(const Value& callee, CallArgs args) = 0;
  virtual Value apply_filter(std::string_view name, const Value& input, CallArgs args) = 0;
  virtual bool apply_test(std::string_view name, const Value& input, CallArgs args) = 0;
};

// The key under which `key` is hashed; throws BuiltinError for unhashable values (list, dict).
std::string hash_key(const Value& key);

}  // namespace kimi::jinja
