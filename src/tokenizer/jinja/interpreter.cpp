#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/pyformat.h"

namespace kimi::jinja {

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent) {
    const auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

class Interpreter::DepthGuard {
 public:
  DepthGuard(Interpreter& in, SourcePos pos) : in_(in) {
    if (++in_.depth_ > kMaxRenderDepth)
      in_.fail(pos, "recursion is too deep while rendering (over " + std::to_string(kMaxRenderDepth) + " levels)");
  }
  ~DepthGuard() { --in_.depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Interpreter& in_;
};

Interpreter::Interpreter(const std::string& template_name, const Dict& globals, const Dict& context,
                         RenderLimits limits)
    : name_(template_name), limits_(limits) {
  Scope& g = new_scope(nullptr);
  for (const auto& [k, v] : globals.entries) g.vars[to_str(k)] = v;
  root_ = &new_scope(&g);
  for (const auto& [k, v] : context.entries) root_->vars[to_str(k)] = v;
}

Scope& Interpreter::new_scope(Scope* parent) {
  scopes_.emplace_back();
  scopes_.back().parent = parent;
  return scopes_.back();
}

void Interpreter::fail(SourcePos pos, const std::string& msg) const { throw kimi::Error(error_prefix(name_, pos) + msg); }

void Interpreter::step(SourcePos pos) {
  if (++steps_ > limits_.max_steps)
    fail(pos, "the template does too much work (over " + std::to_string(limits_.max_steps) +
                  " statements and loop iterations in one render)");
}

void Interpreter::check_output(const std::string& out, SourcePos pos) const {
  if (out.size() > limits_.max_output_bytes)
    fail(pos, "the template's output is too large (over " + std::to_string(limits_.max_output_bytes) + " bytes)");
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  exec_body(body, *root_, out);
  return out;
}

// ---------------------------------------------------------------- statements

Interpreter::Flow Interpreter::exec_body(const Body& body, Scope& scope, std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, Scope& scope, std::string& out) {
  DepthGuard guard(*this, s.pos);
  step(s.pos);
  try {
    switch (s.kind) {
      case StmtKind::Text:
        out += s.text;
        check_output(out, s.pos);
        return Flow::Normal;
      case StmtKind::Output:
        out += to_str(eval(*s.expr, scope));
        check_output(out, s.pos);
        return Flow::Normal;
      case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
        return exec_body(s.else_body, scope, out);
      case StmtKind::For:
        return exec_for(s, scope, out);
      case StmtKind::Set:
      case StmtKind::SetAttr:
        exec_set(s, scope);
        return Flow::Normal;
      case StmtKind::BlockSet: {
        std::string captured;
        exec_body(s.body, new_scope(&scope), captured);  // the body's own assignments stay inside
        scope.vars[s.targets[0]] = apply_filter_chain(s.filters, Value::string(std::move(captured)), scope);
        return Flow::Normal;
      }
      case StmtKind::Macro:
        exec_macro(s, scope);
        return Flow::Normal;
      case StmtKind::CallBlock:
        exec_call_block(s, scope, out);
        return Flow::Normal;
      case StmtKind::FilterBlock: {
        std::string captured;
        exec_body(s.body, new_scope(&scope), captured);
        out += to_str(apply_filter_chain(s.filters, Value::string(std::move(captured)), scope));
        check_output(out, s.pos);
        return Flow::Normal;
      }
      case StmtKind::With: {
        Scope& inner = new_scope(&scope);
        for (const auto& [n, e] : s.assignments) inner.vars[n] = eval(*e, scope);
        return exec_body(s.body, inner, out);
      }
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
      case StmtKind::Do:
        eval(*s.expr, scope);
        return Flow::Normal;
      case StmtKind::Group:
        return exec_body(s.body, scope, out);
    }
  } catch (const BuiltinError& e) {
    fail(s.pos, e.what());
  }
  return Flow::Normal;
}

void Interpreter::assign(const std::vector<std::string>& targets, bool unpack, const Value& v, Scope& scope,
                         SourcePos pos) {
  if (!unpack) {
    scope.vars[targets[0]] = v;
    return;
  }
  const List items = iterate(v);
  if (items.size() != targets.size())
    fail(pos, (items.size() > targets.size() ? "too many values to unpack (expected " : "not enough values to unpack (expected ") +
                  std::to_string(targets.size()) + ", got " + std::to_string(items.size()) + ")");
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
}

void Interpreter::exec_set(const Stmt& s, Scope& scope) {
  Value v = eval(*s.expr, scope);
  if (s.kind == StmtKind::Set) {
    assign(s.targets, s.unpack, v, scope, s.pos);
    return;
  }
  const Value* obj = scope.find(s.targets[0]);
  if (!obj || !obj->is_namespace())
    fail(s.pos, "cannot assign attribute '" + s.targets[1] + "' on '" + s.targets[0] + "': only namespace() objects take attributes");
  try {
    check_no_cycle(*obj, v, "set " + s.targets[0] + "." + s.targets[1]);
  } catch (const BuiltinError& e) {
    fail(s.pos, e.what());
  }
  obj->get_dict().set(std::string_view(s.targets[1]), std::move(v));
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, Scope& scope, std::string& out) {
  const Value iterable = eval(*s.expr, scope);
  if (iterable.is_none() || iterable.is_numeric() || iterable.is_function() || iterable.is_namespace())
    fail(s.expr->pos, "'" + type_name(iterable) + "' object is not iterable");
  List items = iterate(iterable);
  Scope& loop_scope = new_scope(&scope);
  if (s.loop_filter) {
    List kept;
    for (const Value& item : items) {
      step(s.pos);
      assign(s.targets, s.unpack, item, loop_scope, s.pos);
      if (eval(*s.loop_filter, loop_scope).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body, loop_scope, out);

  // Each iteration starts from the enclosing scope: a {% set %} in the body doesn't carry over to
  // the next iteration or out of the loop (Jinja2's scoping; hence namespace()).
  const auto n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step(s.pos);
    loop_scope.vars.clear();
    assign(s.targets, s.unpack, items[size_t(i)], loop_scope, s.pos);
    auto loop = std::make_shared<Dict>();
    loop->set("index", Value::integer(i + 1));
    loop->set("index0", Value::integer(i));
    loop->set("revindex", Value::integer(n - i));
    loop->set("revindex0", Value::integer(n - i - 1));
    loop->set("first", Value::boolean(i == 0));
    loop->set("last", Value::boolean(i == n - 1));
    loop->set("length", Value::integer(n));
    loop->set("depth", Value::integer(1));
    loop->set("depth0", Value::integer(0));
    if (i > 0) loop->set("previtem", items[size_t(i - 1)]);
    if (i + 1 < n) loop->set("nextitem", items[size_t(i + 1)]);
    auto cycle = std::make_shared<Function>();
    cycle->name = "loop.cycle";
    cycle->call = [i](CallArgs& args, Runtime&) -> Value {
      if (args.positional.empty()) throw BuiltinError("loop.cycle() needs at least one argument");
      return args.positional[size_t(i) % args.positional.size()];
    };
    loop->set("cycle", Value::function(std::move(cycle)));
    loop_scope.vars["loop"] = Value::dict(std::move(loop));
    if (exec_body(s.body, loop_scope, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interpreter::exec_macro(const Stmt& s, Scope& scope) {
  auto f = std::make_shared<Function>();
  f->name = s.name;
  Scope* defining = &scope;
  const Stmt* macro = &s;
  f->call = [macro, defining](CallArgs& args, Runtime& rt) -> Value {
    return dynamic_cast<Interpreter&>(rt).call_macro(*macro, defining, args);
  };
  scope.vars[s.name] = Value::function(std::move(f));
}

Value Interpreter::call_macro(const Stmt& m, Scope* defining, CallArgs& args) {
  DepthGuard guard(*this, m.pos);
  Scope& ms = new_scope(defining);
  List varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < m.params.size()) ms.vars[m.params[i].name] = std::move(args.positional[i]);
    else varargs.push_back(std::move(args.positional[i]));
  }
  auto kwargs = std::make_shared<Dict>();
  for (auto& [k, v] : args.keyword) {
    bool is_param = false;
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (m.params[i].name != k) continue;
      if (i < args.positional.size()) throw BuiltinError("macro '" + m.name + "' got multiple values for argument '" + k + "'");
      is_param = true;
    }
    if (is_param || k == "caller") ms.vars[k] = std::move(v);
    else kwargs->set(std::string_view(k), std::move(v));
  }
  // Defaults are evaluated at call time inside the macro, so they can refer to earlier parameters.
  for (const MacroParam& p : m.params) {
    if (ms.vars.count(p.name)) continue;
    ms.vars[p.name] = p.default_value ? eval(*p.default_value, ms) : Value::undefined(p.name);
  }
  ms.vars["varargs"] = Value::tuple(std::move(varargs));
  ms.vars["kwargs"] = Value::dict(std::move(kwargs));
  std::string out;
  exec_body(m.body, ms, out);
  return Value::string(std::move(out));
}

void Interpreter::exec_call_block(const Stmt& s, Scope& scope, std::string& out) {
  // The block body becomes `caller`, a macro the called macro can invoke.
  auto f = std::make_shared<Function>();
  f->name = "caller";
  Scope* defining = &scope;
  const Stmt* block = &s;
  f->call = [block, defining](CallArgs& args, Runtime& rt) -> Value {
    return dynamic_cast<Interpreter&>(rt).call_macro(*block, defining, args);
  };
  const Expr& c = *s.expr;
  const Value callee = eval(*c.left, scope);
  CallArgs args = eval_args(c.args, scope);
  args.keyword.emplace_back("caller", Value::function(std::move(f)));
  try {
    out += to_str(call(callee, std::move(args)));
    check_output(out, s.pos);
  } catch (const BuiltinError& e) {
    fail(c.pos, e.what());
  }
}

Value Interpreter::apply_filter_chain(const std::vector<FilterCall>& filters, Value v, Scope& scope) {
  for (const FilterCall& f : filters) {
    try {
      v = apply_filter(f.name, v, eval_args(f.args, scope));
    } catch (const BuiltinError& e) {
      fail(f.pos, e.what());
    }
  }
  return v;
}

// ---------------------------------------------------------------- expressions

Value Interpreter::eval(const Expr& e, Scope& scope) {
  DepthGuard guard(*this, e.pos);
  try {
    return eval_inner(e, scope);
  } catch (const BuiltinError& err) {
    fail(e.pos, err.what());
  }
}

CallArgs Interpreter::eval_args(const std::vector<Argument>& args, Scope& scope) {
  CallArgs out;
  for (const Argument& a : args) {
    if (a.name.empty()) out.positional.push_back(eval(*a.value, scope));
    else out.keyword.emplace_back(a.name, eval(*a.value, scope));
  }
  return out;
}

Value Interpreter::eval_inner(const Expr& e, Scope& scope) {
  switch (e.kind) {
    case ExprKind::Literal:
      return e.literal;
    case ExprKind::Name: {
      const Value* v = scope.find(e.name);
      return v ? *v : Value::undefined(e.name);
    }
    case ExprKind::ListLit:
    case ExprKind::TupleLit: {
      List items;
      items.reserve(e.items.size());
      for (const ExprPtr& i : e.items) items.push_back(eval(*i, scope));
      return e.kind == ExprKind::ListLit ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::DictLit: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], scope);
        d->set(k, eval(*e.items[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Unary: {
      const Value v = eval(*e.left, scope);
      return e.unary_op == '-' ? negate(v) : unary_plus(v);
    }
    case ExprKind::Binary: {
      const Value l = eval(*e.left, scope);
      const Value r = eval(*e.right, scope);
      return binary_op(e.binary_op, l, r);
    }
    case ExprKind::And: {
      Value l = eval(*e.left, scope);
      return l.truthy() ? eval(*e.right, scope) : l;
    }
    case ExprKind::Or: {
      Value l = eval(*e.left, scope);
      return l.truthy() ? l : eval(*e.right, scope);
    }
    case ExprKind::Not:
      return Value::boolean(!eval(*e.left, scope).truthy());
    case ExprKind::Compare:
      return eval_compare(e, scope);
    case ExprKind::Conditional:
      if (eval(*e.condition, scope).truthy()) return eval(*e.left, scope);
      return e.right ? eval(*e.right, scope) : Value::undefined();
    case ExprKind::GetAttr:
      return get_attr(eval(*e.left, scope), e.name);
    case ExprKind::GetItem: {
      const Value obj = eval(*e.left, scope);
      return get_item(obj, eval(*e.right, scope));
    }
    case ExprKind::Slice:
      return eval_slice(e, scope);
    case ExprKind::Call: {
      const Value callee = eval(*e.left, scope);
      return call(callee, eval_args(e.args, scope));
    }
    case ExprKind::Filter: {
      const Value input = eval(*e.left, scope);
      return apply_filter(e.name, input, eval_args(e.args, scope));
    }
    case ExprKind::Test: {
      const Value input = eval(*e.left, scope);
      return Value::boolean(apply_test(e.name, input, eval_args(e.args, scope)) != e.negated);
    }
  }
  return Value::undefined();
}

Value Interpreter::eval_compare(const Expr& e, Scope& scope) {
  Value left = eval(*e.left, scope);
  for (const auto& [op, expr] : e.comparisons) {
    Value right = eval(*expr, scope);
    bool ok;
    if (op == "==") ok = equals(left, right);
    else if (op == "!=") ok = !equals(left, right);
    else if (op == "in") ok = contains(right, left);
    else if (op == "not in") ok = !contains(right, left);
    else {
      const int c = compare(left, right);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_slice(const Expr& e, Scope& scope) {
  const Value obj = eval(*e.left, scope);
  std::optional<int64_t> bounds[3];
  for (size_t i = 0; i < 3; ++i) {
    if (!e.items[i]) continue;
    const Value v = eval(*e.items[i], scope);
    if (v.is_none() || v.is_undefined()) continue;
    if (!v.is_int() && !v.is_bool()) throw BuiltinError("slice indices must be integers or None, not " + type_name(v));
    bounds[i] = v.get_int();
  }
  return slice(obj, bounds[0], bounds[1], bounds[2]);
}

// ---------------------------------------------------------------- Runtime

Value Interpreter::call(const Value& callee, CallArgs args) {
  if (!callee.is_function()) {
    if (callee.is_undefined())
      throw BuiltinError(callee.undefined_name().empty() ? "called an undefined value"
                                                         : "'" + callee.undefined_name() + "' is undefined and cannot be called");
    throw BuiltinError("'" + type_name(callee) + "' object is not callable");
  }
  return callee.get_function().call(args, *this);
}

Value Interpreter::apply_filter(std::string_view name, const Value& input, CallArgs args) {
  const FilterFn f = find_filter(name);
  if (!f) throw BuiltinError("no filter named '" + std::string(name) + "'");
  return f(*this, input, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& input, CallArgs args) {
  const TestFn t = find_test(name);
  if (!t) throw BuiltinError("no test named '" + std::string(name) + "'");
  return t(*this, input, args);
}

}  // namespace kimi::jinja
