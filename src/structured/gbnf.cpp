#include "structured/gbnf.h"

#include <map>
#include <set>
#include <string>

#include "structured/charset.h"

namespace kimi::structured {

namespace {

constexpr int kMaxNesting = 100;

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view t) : t_(t) {}

  Grammar parse() {
    skip_space();
    if (at_end()) throw GrammarError("grammar: the text has no rules");
    while (!at_end()) {
      const std::string name = read_name();
      if (name.empty()) fail("a rule name");
      skip_space();
      if (t_.substr(i_, 3) != "::=") fail("'::=' after the rule name '" + name + "'");
      i_ += 3;
      const uint32_t r = rule(name);
      if (!defined_.insert(r).second) throw GrammarError("grammar: rule '" + name + "' is defined twice");
      for (Seq& a : alternatives(0)) b_.add_alt(r, std::move(a));
      skip_space();
    }
    auto it = ids_.find("root");
    if (it == ids_.end()) throw GrammarError("grammar: no 'root' rule");
    return b_.build(it->second);
  }

 private:
  [[noreturn]] void fail(const std::string& expected) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    throw GrammarError("grammar: expected " + expected + " at line " + std::to_string(line));
  }
  bool at_end() const { return i_ >= t_.size(); }
  char peek() const { return t_[i_]; }
  static bool name_char(char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '-'; }

  void skip_space() {
    while (!at_end()) {
      if (peek() == '#') {
        while (!at_end() && peek() != '\n') ++i_;
      } else if (std::isspace(uint8_t(peek()))) {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = i_;
    while (!at_end() && name_char(peek())) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  uint32_t rule(const std::string& name) {
    auto [it, fresh] = ids_.try_emplace(name, 0);
    if (fresh) it->second = b_.new_rule(name);
    return it->second;
  }

  // Is `name ::=` next (the start of the next rule)?
  bool at_rule_start() const {
    size_t k = i_;
    while (k < t_.size() && name_char(t_[k])) ++k;
    if (k == i_) return false;
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t' || t_[k] == '\n' || t_[k] == '\r')) ++k;
    return t_.substr(k, 3) == "::=";
  }

  std::vector<Seq> alternatives(int depth) {
    if (depth > kMaxNesting) fail("less nesting (groups nested too deeply)");
    std::vector<Seq> alts;
    alts.push_back(sequence(depth));
    for (;;) {
      skip_space();
      if (at_end() || peek() != '|') break;
      ++i_;
      alts.push_back(sequence(depth));
    }
    return alts;
  }

  uint32_t escape_cp() {  // after a backslash
    if (at_end()) fail("an escape");
    const char c = t_[i_++];
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (at_end() || !std::isxdigit(uint8_t(peek()))) fail("hex digits");
        const char h = t_[i_++];
        v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      return v;
    };
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': {
        const uint32_t v = hex(8);
        if (v > kMaxCodePoint) fail("a code point up to U+10FFFF");
        return v;
      }
      default: --i_; return utf8_decode(t_, i_);
    }
  }

  Seq sequence(int depth) {
    Seq s;
    for (;;) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')' || at_rule_start()) return s;
      Sym a = term(depth);
      skip_space_inline();
      s.push_back(postfix(a));
    }
  }

  void skip_space_inline() {
    while (!at_end() && (peek() == ' ' || peek() == '\t')) ++i_;
  }

  Sym postfix(Sym a) {
    for (;;) {
      if (at_end()) return a;
      const char c = peek();
      if (c == '*') { ++i_; a = b_.repeat(a, 0, -1); }
      else if (c == '+') { ++i_; a = b_.repeat(a, 1, -1); }
      else if (c == '?') { ++i_; a = b_.repeat(a, 0, 1); }
      else if (c == '{') {
        ++i_;
        int64_t lo = read_int(), hi = lo;
        skip_space_inline();
        if (!at_end() && peek() == ',') {
          ++i_;
          skip_space_inline();
          hi = (!at_end() && std::isdigit(uint8_t(peek()))) ? read_int() : -1;
        }
        skip_space_inline();
        if (at_end() || peek() != '}') fail("'}'");
        ++i_;
        if (hi >= 0 && hi < lo) fail("{m,n} with m <= n");
        a = b_.repeat(a, lo, hi);
      } else {
        return a;
      }
    }
  }

  int64_t read_int() {
    skip_space_inline();
    if (at_end() || !std::isdigit(uint8_t(peek()))) fail("a number");
    int64_t v = 0;
    while (!at_end() && std::isdigit(uint8_t(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > 100000000) fail("a number up to 100000000");
      ++i_;
    }
    return v;
  }

  Sym term(int depth) {
    const char c = peek();
    if (c == '"') {
      ++i_;
      std::string bytes;
      for (;;) {
        if (at_end()) fail("a closing '\"'");
        if (peek() == '"') { ++i_; break; }
        if (peek() == '\\') { ++i_; bytes += utf8_encode(escape_cp()); }
        else bytes += t_[i_++];
      }
      if (bytes.empty()) return b_.empty();
      return b_.literal(bytes);
    }
    if (c == '[') {
      ++i_;
      bool negate = false;
      if (!at_end() && peek() == '^') { negate = true; ++i_; }
      CharSet set;
      for (;;) {
        if (at_end()) fail("a closing ']'");
        if (peek() == ']') { ++i_; break; }
        uint32_t lo = peek() == '\\' ? (++i_, escape_cp()) : utf8_decode(t_, i_);
        if (i_ + 1 < t_.size() && peek() == '-' && t_[i_ + 1] != ']') {
          ++i_;
          const uint32_t hi = peek() == '\\' ? (++i_, escape_cp()) : utf8_decode(t_, i_);
          if (hi < lo) fail("a range in order");
          set.add(lo, hi);
        } else {
          set.add(lo);
        }
      }
      return (negate ? set.complement() : set).compile(b_);
    }
    if (c == '.') {
      ++i_;
      CharSet all;
      all.add(0, kMaxCodePoint);
      return all.compile(b_);
    }
    if (c == '<' && i_ + 1 < t_.size() && t_[i_ + 1] == '[') {  // <[id]>: a special token by id
      i_ += 2;
      const int64_t id = read_int();
      if (t_.substr(i_, 2) != "]>") fail("']>' after a token id");
      i_ += 2;
      return b_.literal(special_token_bytes(int32_t(id)));
    }
    if (c == '(') {
      ++i_;
      std::vector<Seq> alts = alternatives(depth + 1);
      skip_space();
      if (at_end() || peek() != ')') fail("')'");
      ++i_;
      return b_.alts(std::move(alts), "group");
    }
    if (name_char(c)) return b_.ref(rule(read_name()));
    fail("a literal, a class, a group or a rule name");
  }

  std::string_view t_;
  size_t i_ = 0;
  GrammarBuilder b_;
  std::map<std::string, uint32_t> ids_;
  std::set<uint32_t> defined_;
};

}  // namespace

Grammar compile_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace kimi::structured
