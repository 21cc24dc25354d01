#pragma once
// A context-free grammar over bytes, the form every structured-output spec (JSON Schema, regex,
// choice, GBNF text) compiles to, and the builder the compilers use. Each rule is a list of
// alternatives; each alternative a sequence of byte classes and rule references, stored flat
// with an End marker after every alternative so that a position in `elems` is a recognizer
// state (structured/matcher.h). Sizes are bounded (kMaxElements, kMaxRules) so that a hostile
// spec costs bounded memory and time; left recursion is rejected (the recognizer is top-down).
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kimi::structured {

// A spec that cannot be compiled: unsupported feature, syntax error, too large. what() names
// the feature or the place.
class GrammarError : public Error {
 public:
  using Error::Error;
};

inline constexpr size_t kMaxElements = 1 << 20;  // grammar elements, all rules together
inline constexpr size_t kMaxRules = 1 << 17;

// The bytes that stand for special token `id` in grammars and in the vocabulary trie: 0xFF (never
// part of UTF-8 text; ordinary tokens holding it are left out of the trie) and the id's three
// low bytes, so a grammar can require a special token (<|tool_call_begin|>...) and nothing else
// spells it.
std::string special_token_bytes(int32_t id);

struct ByteClass {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) set(uint8_t(b));
  }
  bool empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
  auto operator<=>(const ByteClass&) const = default;
};

struct Element {
  enum Kind : uint8_t { Bytes, Rule, End };
  Kind kind;
  uint32_t value;  // Bytes: class index; Rule: rule index
};

struct Grammar {
  std::vector<Element> elems;
  std::vector<std::vector<uint32_t>> rule_alts;  // per rule: start positions of its alternatives
  std::vector<std::string> rule_names;
  std::vector<ByteClass> classes;
  uint32_t root = 0;
};

// A symbol of an alternative: a byte class or a reference to a rule.
struct Sym {
  bool is_rule;
  uint32_t index;
};
using Seq = std::vector<Sym>;

class GrammarBuilder {
 public:
  // A rule with no alternatives yet (so that rules can refer to each other).
  uint32_t new_rule(std::string name);
  void add_alt(uint32_t rule, Seq alt);
  bool has_alts(uint32_t rule) const { return !alts_[rule].empty(); }
  const std::string& name(uint32_t rule) const { return names_[rule]; }

  Sym cls(const ByteClass& c);
  Sym byte(uint8_t b);
  void append_literal(Seq& s, std::string_view bytes);
  Sym ref(uint32_t rule) const { return {true, rule}; }

  // An anonymous rule of these alternatives.
  Sym alts(std::vector<Seq> alternatives, const std::string& hint = "anon");
  Sym seq(Seq s) { return alts({std::move(s)}); }
  Sym literal(std::string_view bytes);
  Sym empty();
  // x repeated [min, max] times; max < 0: unbounded. Right-recursive, so the recognizer's stack
  // stays flat however many repetitions.
  Sym repeat(Sym x, int64_t min, int64_t max);
  // Any one UTF-8 encoded code point (well-formed lead/continuation bytes) not in `except_ascii`.
  Sym utf8_char(const ByteClass& allowed_ascii);

  // Checks (every rule defined, no left recursion, sizes) and flattens. Throws GrammarError.
  Grammar build(uint32_t root) const;

 private:
  void charge(size_t elems);
  std::vector<std::vector<Seq>> alts_;
  std::vector<std::string> names_;
  std::vector<ByteClass> classes_;
  std::map<ByteClass, uint32_t> class_ids_;
  std::map<uint8_t, uint32_t> byte_rules_;
  size_t total_ = 0;
  uint32_t empty_rule_ = UINT32_MAX;
};

}  // namespace kimi::structured
