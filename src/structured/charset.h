#pragma once
// Sets of Unicode code points (character classes of regexes and GBNF) and their compilation to
// byte-level grammar symbols: a set becomes alternatives of UTF-8 byte-class sequences, one per
// run of code points whose encodings share a shape.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace kimi::structured {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

class CharSet {
 public:
  void add(uint32_t lo, uint32_t hi);  // inclusive
  void add(uint32_t cp) { add(cp, cp); }
  void add(const CharSet& o);
  CharSet complement() const;      // within [0, 0x10FFFF]
  CharSet minus(const CharSet& o) const;
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

  // The characters as a grammar symbol (surrogates left out); json_string: the characters as
  // they appear inside a JSON string literal (`"` and `\` escaped, \n \r \t written as escapes,
  // other control characters left out).
  Sym compile(GrammarBuilder& b, bool json_string = false) const;

 private:
  void normalize();
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // sorted, disjoint, not adjacent
};

std::string utf8_encode(uint32_t cp);
// Decodes one code point at s[i], advancing i; invalid bytes decode as themselves (Latin-1).
uint32_t utf8_decode(std::string_view s, size_t& i);

}  // namespace kimi::structured
