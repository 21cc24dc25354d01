#pragma once
// The recognizer: runs a Grammar as a pushdown automaton over bytes. A state is a set of stacks
// of grammar positions (every parse still alive), each with a byte class on top; a byte keeps the
// stacks whose top accepts it and expands them again (calls push the caller's continuation, a
// call in tail position pushes nothing, so right recursion stays flat). Bounded: stacks deeper
// than kMaxStackDepth and states of more than kMaxStacks stacks are cut, and one step does at
// most kMaxExpansions units of work (positions expanded, stacks compared when deduplicating:
// nested nullable repetitions, such as a regex of many stacked quantifiers, reach the same
// stacks along exponentially many paths), so no input can make a step unbounded.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace kimi::structured {

inline constexpr size_t kMaxStackDepth = 2048;
inline constexpr size_t kMaxStacks = 1024;
inline constexpr size_t kMaxExpansions = size_t(1) << 16;

struct ParseState {
  std::vector<uint32_t> data;  // the stacks, bottom first, one after another
  std::vector<uint32_t> ends;  // end offset of each stack in data
  bool complete = false;       // the input so far is a whole sentence of the grammar

  bool dead() const { return ends.empty() && !complete; }
  bool can_continue() const { return !ends.empty(); }
  void clear() {
    data.clear();
    ends.clear();
    complete = false;
  }
  std::string key() const;  // a byte string identifying the state (mask cache key)
  bool operator==(const ParseState&) const = default;
};

class Recognizer {
 public:
  explicit Recognizer(Grammar g);
  const Grammar& grammar() const { return g_; }

  ParseState initial() const;
  // out = the state after byte b (out must not alias in). Returns !out.dead().
  bool advance(const ParseState& in, uint8_t b, ParseState& out) const;
  // Whole-string helpers (tests, the fuzzer): does the grammar accept / could it extend text?
  bool accepts(std::string_view text) const;
  bool accepts_prefix(std::string_view text) const;

 private:
  // budget: the work this step may still do (kMaxExpansions per step).
  void expand(std::vector<uint32_t>& st, ParseState& out, size_t depth, size_t& budget) const;
  void push_stack(const std::vector<uint32_t>& st, ParseState& out, size_t& budget) const;

  Grammar g_;
};

}  // namespace kimi::structured
