#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace kimi::jinja {

namespace {

// Jinja2 rejects unknown filters and tests when it compiles a template, even in branches that
// never run; doing the same gives the error (with its position) up front.
class NameCheck {
 public:
  explicit NameCheck(const std::string& name) : name_(name) {}

  void body(const Body& b) {
    for (const StmtPtr& s : b) stmt(*s);
  }

 private:
  const std::string& name_;

  [[noreturn]] void fail(SourcePos pos, const std::string& msg) const { throw kimi::Error(error_prefix(name_, pos) + msg); }

  void filter_name(const std::string& n, SourcePos pos) const {
    if (!find_filter(n)) fail(pos, "no filter named '" + n + "'");
  }

  void args(const std::vector<Argument>& a) {
    for (const Argument& x : a) expr(x.value.get());
  }

  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::Filter) filter_name(e->name, e->pos);
    if (e->kind == ExprKind::Test && !find_test(e->name)) fail(e->pos, "no test named '" + e->name + "'");
    expr(e->left.get());
    expr(e->right.get());
    expr(e->condition.get());
    for (const ExprPtr& i : e->items) expr(i.get());
    for (const auto& c : e->comparisons) expr(c.second.get());
    args(e->args);
  }

  void stmt(const Stmt& s) {
    expr(s.expr.get());
    expr(s.loop_filter.get());
    for (const auto& [cond, b] : s.branches) {
      expr(cond.get());
      body(b);
    }
    body(s.body);
    body(s.else_body);
    for (const MacroParam& p : s.params) expr(p.default_value.get());
    for (const FilterCall& f : s.filters) {
      filter_name(f.name, f.pos);
      args(f.args);
    }
    for (const auto& a : s.assignments) expr(a.second.get());
  }
};

}  // namespace

struct Template::Impl {
  Options options;
  Body body;
  Dict globals;               // functions
  nlohmann::ordered_json json_globals = nlohmann::ordered_json::object();  // data, converted afresh per render so renders can't share mutations
};

Template::Template(const std::string& source, Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  LexOptions lex;
  lex.trim_blocks = impl_->options.trim_blocks;
  lex.lstrip_blocks = impl_->options.lstrip_blocks;
  lex.keep_trailing_newline = impl_->options.keep_trailing_newline;
  lex.name = impl_->options.name;
  impl_->body = parse(tokenize(source, lex), impl_->options.name);
  NameCheck(impl_->options.name).body(impl_->body);
  add_builtin_globals(impl_->globals);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

void Template::add_function(const std::string& name, NativeFunction fn) {
  auto f = std::make_shared<Function>();
  f->name = name;
  f->call = [fn = std::move(fn)](CallArgs& args, Runtime&) -> Value {
    try {
      return fn(args);
    } catch (const std::exception& e) {
      throw BuiltinError(e.what());  // reported at the call's position
    }
  };
  impl_->globals.set(std::string_view(name), Value::function(std::move(f)));
}

void Template::set_global(const std::string& name, const nlohmann::ordered_json& value) {
  impl_->json_globals[name] = value;
}

namespace {
template <class Json>
Value context_value(const Json& context, const std::string& name) {
  if (context.is_null()) return Value::dict();
  if (!context.is_object()) throw kimi::Error(name + ": the render context must be a JSON object");
  return Value::from_json(context);
}
}  // namespace

std::string Template::render(const nlohmann::ordered_json& context) const {
  return render(context_value(context, impl_->options.name));
}

std::string Template::render(const nlohmann::json& context) const {
  return render(context_value(context, impl_->options.name));
}

std::string Template::render(const Value& context) const {
  if (!context.is_dict()) throw kimi::Error(impl_->options.name + ": the render context must be a dict");
  Dict globals = impl_->globals;
  for (const auto& [k, v] : impl_->json_globals.items()) globals.set(std::string_view(k), Value::from_json(v));
  Interpreter interpreter(impl_->options.name, globals, context.get_dict(),
                          {impl_->options.max_render_steps, impl_->options.max_output_bytes});
  return interpreter.render(impl_->body);
}

}  // namespace kimi::jinja
