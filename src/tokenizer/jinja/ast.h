#pragma once
// The parsed template: expression and statement nodes, owned through unique_ptr by their parent
// and ultimately by the Template. Nodes carry their source position for runtime errors.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/value.h"

namespace kimi::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  Literal, Name, ListLit, TupleLit, DictLit, Unary, Binary, And, Or, Not, Compare, Conditional,
  GetAttr, GetItem, Slice, Call, Filter, Test
};

struct Argument {
  std::string name;  // empty for positional arguments
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  int depth = 1;  // height of this subtree, bounded by the parser

  Value literal;                      // Literal
  std::string name;                   // Name, GetAttr attribute, Filter/Test name
  char unary_op = 0;                  // Unary: '-' or '+'
  BinaryOp binary_op = BinaryOp::Add;  // Binary
  std::vector<ExprPtr> items;         // List/Tuple items; Dict keys and values interleaved; Slice start/stop/step (may be null)
  ExprPtr left, right;                // Binary/And/Or operands; Not/Unary/GetAttr/GetItem/Slice/Call/Filter/Test operand in left; GetItem index in right
  ExprPtr condition;                  // Conditional: `left if condition else right` (right may be null)
  std::vector<std::pair<std::string, ExprPtr>> comparisons;  // Compare: left op1 c1 op2 c2 ...
  std::vector<Argument> args;         // Call/Filter/Test arguments
  bool negated = false;               // Test: `is not`

  Expr(ExprKind k, SourcePos p) : kind(k), pos(p) {}
};

enum class StmtKind {
  Text, Output, If, For, Set, SetAttr, BlockSet, Macro, CallBlock, FilterBlock, With, Break, Continue, Do, Group
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when the parameter has no default
};

// One filter of a chain such as `{% filter trim | upper %}` or `{% set x | trim %}`.
struct FilterCall {
  std::string name;
  std::vector<Argument> args;
  SourcePos pos;
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;

  std::string text;                      // Text
  ExprPtr expr;                          // Output, Set/SetAttr value, For iterable, Do, CallBlock call
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body) for if and each elif
  Body body;                             // For/BlockSet/Macro/CallBlock/FilterBlock/With/Group body
  Body else_body;                        // If/For else
  std::vector<std::string> targets;      // For/Set/BlockSet names; SetAttr: {object, attribute}
  bool unpack = false;                   // targets form a tuple (`for k, v in ...`)
  ExprPtr loop_filter;                   // For: `for x in xs if cond`
  std::string name;                      // Macro name
  std::vector<MacroParam> params;        // Macro / CallBlock caller parameters
  std::vector<FilterCall> filters;       // FilterBlock / BlockSet filters
  std::vector<std::pair<std::string, ExprPtr>> assignments;  // With

  Stmt(StmtKind k, SourcePos p) : kind(k), pos(p) {}
};

}  // namespace kimi::jinja
