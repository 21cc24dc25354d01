#include "structured/regex.h"

#include <string>

#include "structured/charset.h"

namespace kimi::structured {

namespace {

constexpr int kMaxRegexNesting = 100;
constexpr int64_t kMaxRepeat = 10000;

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view p, bool json) : b_(b), p_(p), json_(json) {}

  Sym parse() {
    if (!p_.empty() && p_.front() == '^') ++i_;
    Sym s = alternation(0);
    if (i_ < p_.size()) fail(p_[i_] == ')' ? "an unmatched ')'" : "unexpected character");
    return s;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError("regex: " + what + " at offset " + std::to_string(i_) + " of '" + std::string(p_.substr(0, 200)) + "'");
  }
  bool at_end() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }

  Sym alternation(int depth) {
    if (depth > kMaxRegexNesting) fail("groups nested too deeply");
    std::vector<Seq> alts;
    alts.push_back(concat(depth));
    while (!at_end() && peek() == '|') {
      ++i_;
      alts.push_back(concat(depth));
    }
    if (alts.size() == 1) return b_.seq(std::move(alts[0]));
    return b_.alts(std::move(alts), "regex_alt");
  }

  Seq concat(int depth) {
    Seq s;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && i_ + 1 == p_.size()) {  // the end anchor: the match is whole anyway
        ++i_;
        continue;
      }
      Sym a = atom(depth);
      s.push_back(quantified(a));
    }
    return s;
  }

  bool read_int(int64_t& v) {
    const size_t start = i_;
    v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail("a repetition count above " + std::to_string(kMaxRepeat));
      ++i_;
    }
    return i_ > start;
  }

  Sym quantified(Sym a) {
    for (;;) {
      if (at_end()) return a;
      const char c = peek();
      int64_t lo = 0, hi = -1;
      if (c == '*') { ++i_; }
      else if (c == '+') { ++i_; lo = 1; }
      else if (c == '?') { ++i_; hi = 1; }
      else if (c == '{') {
        const size_t save = i_;
        ++i_;
        if (!read_int(lo)) { i_ = save; return a; }  // a literal '{'
        hi = lo;
        if (!at_end() && peek() == ',') {
          ++i_;
          if (!read_int(hi)) hi = -1;
        }
        if (at_end() || peek() != '}') fail("an unterminated {m,n}");
        ++i_;
        if (hi >= 0 && hi < lo) fail("{m,n} with n < m");
      } else {
        return a;
      }
      if (!at_end() && (peek() == '?' || peek() == '+')) ++i_;  // lazy / possessive: same language
      a = b_.repeat(a, lo, hi);
    }
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (at_end() || !isxdigit(uint8_t(peek()))) fail("a bad hex escape");
      const char c = peek();
      v = v * 16 + uint32_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
      ++i_;
    }
    return v;
  }

  static CharSet digits() { CharSet s; s.add('0', '9'); return s; }
  static CharSet word() { CharSet s; s.add('0', '9'); s.add('a', 'z'); s.add('A', 'Z'); s.add('_'); return s; }
  static CharSet space() {
    CharSet s;
    s.add(' ');
    s.add('\t', '\r');  // \t \n \v \f \r
    s.add(0xA0); s.add(0x1680); s.add(0x2000, 0x200A); s.add(0x2028, 0x2029); s.add(0x202F); s.add(0x205F);
    s.add(0x3000); s.add(0xFEFF);
    return s;
  }

  // After a backslash: a class escape (returns true and fills set) or one character (cp).
  bool escape(CharSet& set, uint32_t& cp, bool in_class) {
    if (at_end()) fail("a trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': set = digits(); return true;
      case 'D': set = digits().complement(); return true;
      case 'w': set = word(); return true;
      case 'W': set = word().complement(); return true;
      case 's': set = space(); return true;
      case 'S': set = space().complement(); return true;
      case 'n': cp = '\n'; return false;
      case 't': cp = '\t'; return false;
      case 'r': cp = '\r'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = hex(2); return false;
      case 'u':
        if (!at_end() && peek() == '{') {
          ++i_;
          cp = 0;
          while (!at_end() && peek() != '}') cp = cp * 16 + hex(1);
          if (at_end() || cp > kMaxCodePoint) fail("a bad \\u{...} escape");
          ++i_;
        } else {
          cp = hex(4);
        }
        return false;
      case 'b':
        if (in_class) { cp = '\b'; return false; }
        fail("word boundaries (\\b) are not supported");
      case 'B': fail("word boundaries (\\B) are not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        if (std::isalnum(uint8_t(c))) fail(std::string("the escape \\") + c + " is not supported");
        --i_;
        cp = utf8_decode(p_, i_);
        return false;
    }
  }

  uint32_t literal_cp() { return utf8_decode(p_, i_); }

  CharSet bracket() {  // after '['
    bool negate = false;
    if (!at_end() && peek() == '^') { negate = true; ++i_; }
    CharSet set;
    bool first = true;
    for (;;) {
      if (at_end()) fail("an unterminated character class");
      if (peek() == ']' && !first) { ++i_; break; }
      first = false;
      CharSet cls;
      uint32_t lo;
      bool is_class = false;
      if (peek() == '\\') { ++i_; is_class = escape(cls, lo, true); }
      else lo = literal_cp();
      if (is_class) { set.add(cls); continue; }
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        if (peek() == '\\') {
          ++i_;
          if (escape(cls, hi, true)) fail("a class escape as the end of a range");
        } else {
          hi = literal_cp();
        }
        if (hi < lo) fail("a range out of order");
        set.add(lo, hi);
      } else {
        set.add(lo);
      }
    }
    return negate ? set.complement() : set;
  }

  Sym chars(const CharSet& s) { return s.compile(b_, json_); }

  Sym atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (!at_end() && peek() == '?') {
        ++i_;
        if (at_end()) fail("an unterminated group");
        if (peek() == ':') ++i_;
        else if (peek() == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
          while (!at_end() && peek() != '>') ++i_;
          ++i_;
        } else if (peek() == 'P' && i_ + 1 < p_.size() && p_[i_ + 1] == '<') {
          while (!at_end() && peek() != '>') ++i_;
          ++i_;
        } else {
          fail("lookaround and inline flags ((?=, (?!, (?<=, (?i)...) are not supported");
        }
      }
      Sym s = alternation(depth + 1);
      if (at_end() || peek() != ')') fail("an unterminated group");
      ++i_;
      return s;
    }
    if (c == '[') { ++i_; return chars(bracket()); }
    if (c == '.') {
      ++i_;
      CharSet nl;
      nl.add('\n');
      return chars(nl.complement());
    }
    if (c == '\\') {
      ++i_;
      CharSet set;
      uint32_t cp;
      if (escape(set, cp, false)) return chars(set);
      CharSet one;
      one.add(cp);
      return chars(one);
    }
    if (c == '*' || c == '+' || c == '?') fail("a quantifier with nothing to repeat");
    if (c == '^') fail("'^' inside the pattern (anchors are only supported at the ends)");
    if (c == '$') fail("'$' inside the pattern (anchors are only supported at the ends)");
    CharSet one;
    one.add(literal_cp());
    return chars(one);
  }

  GrammarBuilder& b_;
  std::string_view p_;
  bool json_;
  size_t i_ = 0;
};

}  // namespace

Sym compile_regex(GrammarBuilder& b, std::string_view pattern, bool json_string) {
  return RegexParser(b, pattern, json_string).parse();
}

}  // namespace kimi::structured
