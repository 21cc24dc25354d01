#pragma once
// Executes a parsed template. One Interpreter serves one render call: it owns that render's
// variable scopes and enforces the recursion bound (macros may recurse).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace kimi::jinja {

// Nested evaluation deeper than this (through macro recursion) is an error, not a stack overflow.
inline constexpr int kMaxRenderDepth = 1000;

struct Scope {
  Scope* parent = nullptr;  // enclosing scope; scopes are owned by the Interpreter's arena
  std::unordered_map<std::string, Value> vars;

  const Value* find(const std::string& name) const;
};

// A render's budget (Options::max_render_steps / max_output_bytes in template.h).
struct RenderLimits {
  int64_t max_steps = 100'000'000;
  size_t max_output_bytes = size_t(1) << 30;
};

class Interpreter final : public Runtime {
 public:
  // `globals` is the bottom scope (builtins and registered functions), `context` the render's variables.
  Interpreter(const std::string& template_name, const Dict& globals, const Dict& context, RenderLimits limits = {});

  std::string render(const Body& body);

  Value call(const Value& callee, CallArgs args) override;
  Value apply_filter(std::string_view name, const Value& input, CallArgs args) override;
  bool apply_test(std::string_view name, const Value& input, CallArgs args) override;

 private:
  enum class Flow { Normal, Break, Continue };

  const std::string& name_;
  std::deque<Scope> scopes_;  // arena with stable addresses: macros keep pointers to their defining scope
  Scope* root_ = nullptr;
  int depth_ = 0;
  RenderLimits limits_;
  int64_t steps_ = 0;

  class DepthGuard;

  void step(SourcePos pos);                                 // counts one unit of work against the budget
  void check_output(const std::string& out, SourcePos pos) const;  // the output stays under its bound

  Scope& new_scope(Scope* parent);
  [[noreturn]] void fail(SourcePos pos, const std::string& msg) const;

  Flow exec_body(const Body& body, Scope& scope, std::string& out);
  Flow exec(const Stmt& s, Scope& scope, std::string& out);
  Flow exec_for(const Stmt& s, Scope& scope, std::string& out);
  void exec_set(const Stmt& s, Scope& scope);
  void exec_macro(const Stmt& s, Scope& scope);
  void exec_call_block(const Stmt& s, Scope& scope, std::string& out);
  Value apply_filter_chain(const std::vector<FilterCall>& filters, Value v, Scope& scope);
  void assign(const std::vector<std::string>& targets, bool unpack, const Value& v, Scope& scope, SourcePos pos);

  Value eval(const Expr& e, Scope& scope);
  Value eval_inner(const Expr& e, Scope& scope);
  Value eval_compare(const Expr& e, Scope& scope);
  Value eval_slice(const Expr& e, Scope& scope);
  CallArgs eval_args(const std::vector<Argument>& args, Scope& scope);
  Value call_macro(const Stmt& macro, Scope* defining, CallArgs& args);
};

}  // namespace kimi::jinja
