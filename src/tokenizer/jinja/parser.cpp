#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace kimi::jinja {

namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : toks_(std::move(tokens)), name_(name) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != TokenType::End) fail(cur().pos, "unexpected '" + cur().text + "'");
    return body;
  }

 private:
  std::vector<Token> toks_;
  const std::string& name_;
  size_t i_ = 0;
  int recursion_ = 0;   // parser call nesting (expressions and blocks)
  int loop_depth_ = 0;  // enclosing for loops, for break/continue

  // Counts one level of parser recursion; too deep nesting is an error, not a stack overflow.
  class Nest {
   public:
    Nest(Parser& p, SourcePos pos) : p_(p) {
      if (++p_.recursion_ > kMaxNesting) p_.fail(pos, "template is nested too deeply (over " + std::to_string(kMaxNesting) + " levels)");
    }
    ~Nest() { --p_.recursion_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  [[noreturn]] void fail(SourcePos pos, const std::string& msg) const { throw kimi::Error(error_prefix(name_, pos) + msg); }

  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Text: return "text";
      case TokenType::VarBegin: return "'{{'";
      case TokenType::VarEnd: return "'}}'";
      case TokenType::BlockBegin: return "'{%'";
      case TokenType::BlockEnd: return "'%}'";
      case TokenType::String: return "string literal";
      case TokenType::Integer:
      case TokenType::Float: return "number '" + t.text + "'";
      case TokenType::End: return "end of template";
      default: return "'" + t.text + "'";
    }
  }

  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail(cur().pos, "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) fail(cur().pos, "expected end of tag '%}', got " + describe(cur()));
    advance();
  }
  std::string expect_name(const char* what) {
    if (cur().type != TokenType::Name) fail(cur().pos, std::string("expected ") + what + ", got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }

  // Sets the node's subtree height from its children and enforces the nesting bound.
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    const auto see = [&](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    see(e->left);
    see(e->right);
    see(e->condition);
    for (const auto& c : e->items) see(c);
    for (const auto& c : e->comparisons) see(c.second);
    for (const auto& a : e->args) see(a.value);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth)
      fail(e->pos, "expression is nested too deeply (over " + std::to_string(kMaxExprDepth) + " levels)");
    return e;
  }

  static ExprPtr node(ExprKind k, SourcePos p) { return std::make_unique<Expr>(k, p); }

  // ---- statements ----

  // Parses statements until a block tag whose name is in `end_tags` (left unconsumed) or the end.
  Body parse_body(std::initializer_list<std::string_view> end_tags) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::End:
          if (end_tags.size() != 0)
            fail(t.pos, "unexpected end of template, expected '" + std::string(*end_tags.begin()) + "'");
          return body;
        case TokenType::Text: {
          auto s = std::make_unique<Stmt>(StmtKind::Text, t.pos);
          s->text = t.text;
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::VarBegin: {
          auto s = std::make_unique<Stmt>(StmtKind::Output, t.pos);
          advance();
          s->expr = parse_tuple(true, false);
          if (cur().type != TokenType::VarEnd) fail(cur().pos, "expected end of print statement '}}', got " + describe(cur()));
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::BlockBegin: {
          const Token& n = peek();
          if (n.type == TokenType::Name &&
              std::find(end_tags.begin(), end_tags.end(), std::string_view(n.text)) != end_tags.end())
            return body;
          advance();
          if (StmtPtr s = parse_statement()) body.push_back(std::move(s));
          break;
        }
        default:
          fail(t.pos, "unexpected " + describe(t));
      }
    }
  }

  // At a block tag named `tag`: consumes "{% tag" (the caller then reads the rest of the tag).
  void expect_tag(std::string_view tag) {
    if (cur().type != TokenType::BlockBegin || peek().text != tag) fail(cur().pos, "expected '{% " + std::string(tag) + " %}'");
    advance();
    advance();
  }

  Body parse_block_body(std::initializer_list<std::string_view> end_tags) {
    Nest n(*this, cur().pos);
    return parse_body(end_tags);
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::Name) fail(t.pos, "expected a statement name after '{%', got " + describe(t));
    const std::string tag = t.text;
    const SourcePos pos = t.pos;
    advance();
    if (tag == "if") return parse_if(pos);
    if (tag == "for") return parse_for(pos);
    if (tag == "set") return parse_set(pos);
    if (tag == "macro") return parse_macro(pos);
    if (tag == "call") return parse_call_block(pos);
    if (tag == "filter") return parse_filter_block(pos);
    if (tag == "with") return parse_with(pos);
    if (tag == "generation") return parse_generation(pos);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(pos, "'" + tag + "' outside of a for loop");
      expect_block_end();
      return std::make_unique<Stmt>(tag == "break" ? StmtKind::Break : StmtKind::Continue, pos);
    }
    if (tag == "do") {
      auto s = std::make_unique<Stmt>(StmtKind::Do, pos);
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    static constexpr std::string_view kUnsupported[] = {"include", "import", "from", "extends", "block", "autoescape", "trans"};
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), tag) != std::end(kUnsupported))
      fail(pos, "'{% " + tag + " %}' is not supported (templates here are self-contained)");
    if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif")
      fail(pos, "unexpected '{% " + tag + " %}' without a matching opening tag");
    fail(pos, "unknown tag '" + tag + "'");
  }

  StmtPtr parse_if(SourcePos pos) {
    auto s = std::make_unique<Stmt>(StmtKind::If, pos);
    ExprPtr cond = parse_tuple(false, false);
    expect_block_end();
    while (true) {
      Body body = parse_block_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      const std::string tag = peek().text;
      advance();
      advance();
      if (tag == "elif") {
        cond = parse_tuple(false, false);
        expect_block_end();
        continue;
      }
      if (tag == "else") {
        expect_block_end();
        s->else_body = parse_block_body({"endif"});
        expect_tag("endif");
      }
      expect_block_end();
      return s;
    }
  }

  // Names assigned by for/set: `x`, `a, b` or `(a, b)`.
  void parse_targets(Stmt& s) {
    const bool paren = accept_op("(");
    do {
      if (paren && is_op(")")) break;
      s.targets.push_back(expect_name("a variable name"));
    } while (accept_op(","));
    s.unpack = s.targets.size() > 1 || paren;
    if (paren) expect_op(")");
    if (s.targets.empty()) fail(s.pos, "expected a variable name");
  }

  StmtPtr parse_for(SourcePos pos) {
    auto s = std::make_unique<Stmt>(StmtKind::For, pos);
    parse_targets(*s);
    if (!accept_name("in")) fail(cur().pos, "expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_tuple(false, false);
    if (accept_name("if")) s->loop_filter = parse_expression(true);
    if (is_name("recursive")) fail(cur().pos, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_block_body({"endfor", "else"});
    --loop_depth_;
    const std::string tag = peek().text;
    advance();
    advance();
    if (tag == "else") {
      expect_block_end();
      s->else_body = parse_block_body({"endfor"});
      expect_tag("endfor");
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(SourcePos pos) {
    if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == ".") {
      auto s = std::make_unique<Stmt>(StmtKind::SetAttr, pos);
      s->targets.push_back(cur().text);
      advance();
      advance();
      s->targets.push_back(expect_name("an attribute name"));
      expect_op("=");
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    auto s = std::make_unique<Stmt>(StmtKind::Set, pos);
    parse_targets(*s);
    if (accept_op("=")) {
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    if (s->unpack) fail(pos, "a block set takes a single name");
    s->kind = StmtKind::BlockSet;
    while (accept_op("|")) s->filters.push_back(parse_filter_call());
    expect_block_end();
    s->body = parse_block_body({"endset"});
    expect_tag("endset");
    expect_block_end();
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name("a parameter name");
      if (accept_op("=")) p.default_value = parse_expression(true);
      else if (!params.empty() && params.back().default_value)
        fail(cur().pos, "parameter '" + p.name + "' without a default follows one with a default");
      params.push_back(std::move(p));
    }
    advance();
  }

  StmtPtr parse_macro(SourcePos pos) {
    auto s = std::make_unique<Stmt>(StmtKind::Macro, pos);
    s->name = expect_name("a macro name");
    parse_params(s->params);
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro boundary
    s->body = parse_block_body({"endmacro"});
    loop_depth_ = saved;
    expect_tag("endmacro");
    if (cur().type == TokenType::Name) advance();  // `{% endmacro name %}`
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(SourcePos pos) {
    auto s = std::make_unique<Stmt>(StmtKind::CallBlock, pos);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail(pos, "'{% call %}' needs a macro call, e.g. {% call m(x) %}");
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_block_body({"endcall"});
    loop_depth_ = saved;
    expect_tag("endcall");
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(SourcePos pos) {
    auto s = std::make_unique<Stmt>(StmtKind::FilterBlock, pos);
    do s->filters.push_back(parse_filter_call());
    while (accept_op("|"));
    expect_block_end();
    s->body = parse_block_body({"endfilter"});
    expect_tag("endfilter");
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(SourcePos pos) {
    auto s = std::make_unique<Stmt>(StmtKind::With, pos);
    while (cur().type != TokenType::BlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      std::string n = expect_name("a variable name");
      expect_op("=");
      s->assignments.emplace_back(std::move(n), parse_expression(true));
    }
    expect_block_end();
    s->body = parse_block_body({"endwith"});
    expect_tag("endwith");
    expect_block_end();
    return s;
  }

  StmtPtr parse_generation(SourcePos pos) {
    // Hugging Face's {% generation %} marks assistant text for masks; rendering is unchanged.
    auto s = std::make_unique<Stmt>(StmtKind::Group, pos);
    expect_block_end();
    s->body = parse_block_body({"endgeneration"});
    expect_tag("endgeneration");
    expect_block_end();
    return s;
  }

  FilterCall parse_filter_call() {
    FilterCall f;
    f.pos = cur().pos;
    f.name = expect_name("a filter name");
    while (is_op(".") && peek().type == TokenType::Name) {
      advance();
      f.name += "." + cur().text;
      advance();
    }
    if (is_op("(")) f.args = parse_call_args();
    return f;
  }

  // ---- expressions ----

  bool at_tuple_end() const {
    const TokenType t = cur().type;
    return t == TokenType::VarEnd || t == TokenType::BlockEnd || t == TokenType::End || is_op(")") ||
           is_name("in") || is_name("if") || is_name("recursive");
  }

  // A comma-separated list forms a tuple: `{{ a, b }}`, `{% set x = 1, 2 %}`, `(a, b)`.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens) {
    const SourcePos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty() && !accept_op(",")) break;
      if (!items.empty() && at_tuple_end()) break;
      if (items.empty() && explicit_parens && is_op(")")) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(pos, "expected an expression, got " + describe(cur()));
    }
    auto t = node(ExprKind::TupleLit, pos);
    t->items = std::move(items);
    return seal(std::move(t));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Nest n(*this, cur().pos);
    if (!with_condexpr) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const SourcePos pos = cur().pos;
      advance();
      auto c = node(ExprKind::Conditional, pos);
      c->condition = parse_or();
      c->left = std::move(e);
      if (accept_name("else")) c->right = parse_expression(true);
      e = seal(std::move(c));
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      auto o = node(ExprKind::Or, cur().pos);
      advance();
      o->left = std::move(e);
      o->right = parse_and();
      e = seal(std::move(o));
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      auto a = node(ExprKind::And, cur().pos);
      advance();
      a->left = std::move(e);
      a->right = parse_not();
      e = seal(std::move(a));
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest n(*this, cur().pos);
      auto e = node(ExprKind::Not, cur().pos);
      advance();
      e->left = parse_not();
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const SourcePos pos = cur().pos;
    ExprPtr first = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      if (cur().type == TokenType::Operator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        std::string op = cur().text;
        advance();
        ops.emplace_back(std::move(op), parse_math1());
      } else if (is_name("in")) {
        advance();
        ops.emplace_back("in", parse_math1());
      } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        advance();
        advance();
        ops.emplace_back("not in", parse_math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return first;
    auto c = node(ExprKind::Compare, pos);
    c->left = std::move(first);
    c->comparisons = std::move(ops);
    return seal(std::move(c));
  }

  ExprPtr binary(BinaryOp op, SourcePos pos, ExprPtr l, ExprPtr r) {
    auto b = node(ExprKind::Binary, pos);
    b->binary_op = op;
    b->left = std::move(l);
    b->right = std::move(r);
    return seal(std::move(b));
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinaryOp op = cur().text == "+" ? BinaryOp::Add : BinaryOp::Sub;
      const SourcePos pos = cur().pos;
      advance();
      e = binary(op, pos, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const SourcePos pos = cur().pos;
      advance();
      e = binary(BinaryOp::Concat, pos, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& t = cur().text;
      const BinaryOp op = t == "*" ? BinaryOp::Mul : t == "/" ? BinaryOp::Div : t == "//" ? BinaryOp::FloorDiv : BinaryOp::Mod;
      const SourcePos pos = cur().pos;
      advance();
      e = binary(op, pos, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const SourcePos pos = cur().pos;
      advance();
      e = binary(BinaryOp::Pow, pos, std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest n(*this, cur().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(ExprKind::Unary, cur().pos);
      e->unary_op = cur().text[0];
      advance();
      e->left = parse_unary(false);
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const SourcePos pos = t.pos;
    switch (t.type) {
      case TokenType::Name: {
        auto e = node(ExprKind::Literal, pos);
        if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->kind = ExprKind::Name;
          e->name = t.text;
        }
        advance();
        return seal(std::move(e));
      }
      case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) {  // adjacent literals concatenate, as in Python
          s += cur().text;
          advance();
        }
        auto e = node(ExprKind::Literal, pos);
        e->literal = Value::string(std::move(s));
        return seal(std::move(e));
      }
      case TokenType::Integer:
      case TokenType::Float: {
        auto e = node(ExprKind::Literal, pos);
        e->literal = t.type == TokenType::Integer ? Value::integer(t.int_value) : Value::number(t.float_value);
        advance();
        return seal(std::move(e));
      }
      case TokenType::Operator:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail(pos, "unexpected " + describe(t) + " in expression");
  }

  ExprPtr parse_list() {
    auto e = node(ExprKind::ListLit, cur().pos);
    advance();
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    advance();
    return seal(std::move(e));
  }

  ExprPtr parse_dict() {
    auto e = node(ExprKind::DictLit, cur().pos);
    advance();
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      e->items.push_back(parse_expression(true));
      expect_op(":");
      e->items.push_back(parse_expression(true));
    }
    advance();
    return seal(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const SourcePos pos = cur().pos;
        advance();
        if (cur().type == TokenType::Name) {
          auto g = node(ExprKind::GetAttr, pos);
          g->name = cur().text;
          advance();
          g->left = std::move(e);
          e = seal(std::move(g));
        } else if (cur().type == TokenType::Integer) {
          auto g = node(ExprKind::GetItem, pos);
          auto idx = node(ExprKind::Literal, cur().pos);
          idx->literal = Value::integer(cur().int_value);
          advance();
          g->left = std::move(e);
          g->right = seal(std::move(idx));
          e = seal(std::move(g));
        } else {
          fail(cur().pos, "expected an attribute name after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const SourcePos pos = cur().pos;
    advance();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) {
        if (is_op(",")) {  // obj[a, b] indexes with a tuple
          auto t = node(ExprKind::TupleLit, start->pos);
          t->items.push_back(std::move(start));
          while (accept_op(",") && !is_op("]")) t->items.push_back(parse_expression(true));
          start = seal(std::move(t));
        }
        expect_op("]");
        auto g = node(ExprKind::GetItem, pos);
        g->left = std::move(obj);
        g->right = std::move(start);
        return seal(std::move(g));
      }
    }
    advance();  // ':'
    auto s = node(ExprKind::Slice, pos);
    s->left = std::move(obj);
    s->items.push_back(std::move(start));
    s->items.push_back(is_op("]") || is_op(":") ? nullptr : parse_expression(true));
    ExprPtr step;
    if (accept_op(":") && !is_op("]")) step = parse_expression(true);
    s->items.push_back(std::move(step));
    expect_op("]");
    return seal(std::move(s));
  }

  std::vector<Argument> parse_call_args() {
    expect_op("(");
    std::vector<Argument> args;
    bool seen_keyword = false;
    while (!is_op(")")) {
      if (!args.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur().pos, "'*args' / '**kwargs' in calls are not supported");
      Argument a;
      if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
        a.name = cur().text;
        advance();
        advance();
        seen_keyword = true;
      } else if (seen_keyword) {
        fail(cur().pos, "positional argument follows keyword argument");
      }
      a.value = parse_expression(true);
      args.push_back(std::move(a));
    }
    advance();
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = node(ExprKind::Call, callee->pos);  // errors point at what is called, not at '('
    c->args = parse_call_args();
    c->left = std::move(callee);
    return seal(std::move(c));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        advance();
        auto f = node(ExprKind::Filter, cur().pos);
        FilterCall fc = parse_filter_call();
        f->name = std::move(fc.name);
        f->args = std::move(fc.args);
        f->left = std::move(e);
        e = seal(std::move(f));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr e) {
    auto t = node(ExprKind::Test, cur().pos);
    advance();  // 'is'
    t->negated = accept_name("not");
    t->name = expect_name("a test name");
    while (is_op(".") && peek().type == TokenType::Name) {
      advance();
      t->name += "." + cur().text;
      advance();
    }
    const TokenType ty = cur().type;
    if (is_op("(")) {
      t->args = parse_call_args();
    } else if ((ty == TokenType::Name || ty == TokenType::String || ty == TokenType::Integer || ty == TokenType::Float ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
      if (is_name("is")) fail(cur().pos, "tests cannot be chained with 'is'");
      Argument a;
      a.value = parse_postfix(parse_primary());
      t->args.push_back(std::move(a));
    }
    t->left = std::move(e);
    return seal(std::move(t));
  }
};

}  // namespace

Body parse(std::vector<Token> tokens, const std::string& name) { return Parser(std::move(tokens), name).parse_template(); }

}  // namespace kimi::jinja
