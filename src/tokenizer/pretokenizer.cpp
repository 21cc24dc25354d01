#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <utility>

#include "common/error.h"
#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace kimi {

namespace {

struct CodeFree {
  void operator()(pcre2_code* p) const { pcre2_code_free(p); }
};
struct MatchDataFree {
  void operator()(pcre2_match_data* p) const { pcre2_match_data_free(p); }
};
struct MatchContextFree {
  void operator()(pcre2_match_context* p) const { pcre2_match_context_free(p); }
};
struct JitStackFree {
  void operator()(pcre2_jit_stack* p) const { pcre2_jit_stack_free(p); }
};

// The Kimi pattern on ASCII, written out: most text is mostly ASCII, and this is faster still than
// KimiMatcher below. Returns false ("undecided") whenever the piece or the character that decides
// where it ends is not ASCII; KimiMatcher then decides from the same place, so the result is the
// pattern's either way (tests compare the two with PCRE2 on random text).
enum Kind : uint8_t { kUpper, kLower, kDigit, kCrLf, kSpace, kOther, kEnd, kUnknown };

constexpr std::array<Kind, 128> make_ascii_kinds() {
  std::array<Kind, 128> k{};
  for (int c = 0; c < 128; ++c) {
    if (c >= 'A' && c <= 'Z')
      k[size_t(c)] = kUpper;
    else if (c >= 'a' && c <= 'z')
      k[size_t(c)] = kLower;
    else if (c >= '0' && c <= '9')
      k[size_t(c)] = kDigit;
    else if (c == '\r' || c == '\n')
      k[size_t(c)] = kCrLf;
    else if (c == ' ' || c == '\t' || c == '\v' || c == '\f')  // the rest of ASCII White_Space
      k[size_t(c)] = kSpace;
    else
      k[size_t(c)] = kOther;  // punctuation, symbols, other controls (U+001C..U+001F included)
  }
  return k;
}
constexpr std::array<Kind, 128> kAsciiKinds = make_ascii_kinds();

bool ascii_piece(std::string_view t, size_t i, size_t end, size_t& out) {
  const auto kind = [&](size_t k) {
    if (k >= end) return kEnd;
    const auto b = uint8_t(t[k]);
    return b < 0x80 ? kAsciiKinds[b] : kUnknown;
  };
  const Kind c = kind(i);
  // Alternatives 2 and 3: [^\r\n\p{L}\p{N}]? then upper* lower+ (2) or upper+ lower* (3), then a
  // contraction. In ASCII the two letter classes do not overlap, so no backtracking is needed.
  if (c == kUpper || c == kLower || c == kSpace || c == kOther) {
    const size_t p = (c == kSpace || c == kOther) ? i + 1 : i;
    size_t u = p;
    while (kind(u) == kUpper) ++u;
    size_t l = u;
    while (kind(l) == kLower) ++l;
    if (kind(l) == kUnknown) return false;  // a non-ASCII letter could continue the run
    if (l > p) {
      // (?i:'s|'t|'re|'ve|'m|'ll|'d)?
      size_t e = l;
      if (e < end && t[e] == '\'') {
        const Kind k1 = kind(e + 1);
        if (k1 == kUnknown) return false;  // U+017F folds to s
        if (k1 == kUpper || k1 == kLower) {  // only then is t[e + 1] inside the text
          const char a = char(t[e + 1] | 0x20);
          if (a == 's' || a == 't' || a == 'm' || a == 'd') {
            e += 2;
          } else if (a == 'r' || a == 'v' || a == 'l') {
            const Kind k2 = kind(e + 2);
            if (k2 == kUnknown) return false;
            if ((k2 == kUpper || k2 == kLower) && char(t[e + 2] | 0x20) == (a == 'l' ? 'l' : 'e')) e += 3;
          }
        }
      }
      out = e;
      return true;
    }
  }
  // Alternative 4: \p{N}{1,3}.
  if (c == kDigit) {
    size_t k = i;
    while (k < i + 3 && kind(k) == kDigit) ++k;
    if (k < i + 3 && kind(k) == kUnknown) return false;  // could be a non-ASCII digit
    out = k;
    return true;
  }
  // Alternative 5: " ?[^\s\p{L}\p{N}]+[\r\n]*".
  if (c == kOther || (c == kSpace && t[i] == ' ')) {
    size_t k = c == kOther ? i : i + 1;
    const size_t start = k;
    while (kind(k) == kOther) ++k;
    if (kind(k) == kUnknown) return false;
    if (k > start) {
      while (kind(k) == kCrLf) ++k;
      out = k;
      return true;
    }
  }
  // Alternatives 6-8 on a whitespace run: up to its last CR/LF (6); else all of it at the end of
  // the text, or all but its last character when that is more than one (7); else the one (8).
  if (c == kSpace || c == kCrLf) {
    size_t j = i, last_newline = SIZE_MAX;
    for (Kind k = c; k == kSpace || k == kCrLf; k = kind(++j))
      if (k == kCrLf) last_newline = j;
    if (kind(j) == kUnknown) return false;  // could be more whitespace
    if (last_newline != SIZE_MAX)
      out = last_newline + 1;
    else if (kind(j) == kEnd || j - i == 1)
      out = j;
    else
      out = j - 1;
    return true;
  }
  return false;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

const std::string& PreTokenizer::kimi_pattern_original() {
  static const std::string p =
      R"([\p{Han}]+)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|\p{N}{1,3})"
      R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
      R"(|\s*[\r\n]+)"
      R"(|\s+(?!\S))"
      R"(|\s+)";
  return p;
}

namespace {

// Code-point sets as sorted, disjoint, non-adjacent inclusive ranges, to build the pattern's
// classes from the Unicode tables.
using CodePoints = std::vector<unicode::Range>;

CodePoints normalized(CodePoints v) {
  std::sort(v.begin(), v.end(), [](const unicode::Range& a, const unicode::Range& b) { return a.first < b.first; });
  CodePoints out;
  for (const unicode::Range& r : v) {
    if (!out.empty() && r.first <= out.back().last + 1)
      out.back().last = std::max(out.back().last, r.last);
    else
      out.push_back(r);
  }
  return out;
}

CodePoints union_of(std::initializer_list<unicode::Property> props, CodePoints extra = {}) {
  for (const unicode::Property p : props) {
    const auto r = unicode::ranges(p);
    extra.insert(extra.end(), r.begin(), r.end());
  }
  return normalized(std::move(extra));
}

CodePoints minus(const CodePoints& a, const CodePoints& b) {
  CodePoints out;
  size_t j = 0;
  for (unicode::Range r : a) {
    while (j < b.size() && b[j].last < r.first) ++j;
    for (size_t k = j; k < b.size() && b[k].first <= r.last; ++k) {
      if (b[k].first > r.first) out.push_back({r.first, b[k].first - 1});
      if (b[k].last >= r.last) {
        r.first = r.last + 1;  // consumed
        break;
      }
      r.first = b[k].last + 1;
    }
    if (r.first <= r.last) out.push_back(r);
  }
  return out;
}

// A PCRE2 class, "[" or "[^" then every code point as \x{...} (so that no character is special).
// Built by appending: GCC 12 warns wrongly (-Wrestrict) about chains of std::string operator+.
std::string pcre2_class(const char* open, const CodePoints& set) {
  std::string out = open;
  char buf[32];
  for (const unicode::Range& r : set) {
    if (r.first == r.last)
      std::snprintf(buf, sizeof buf, "\\x{%X}", unsigned(r.first));
    else
      std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", unsigned(r.first), unsigned(r.last));
    out += buf;
  }
  out += ']';
  return out;
}

// One contraction of (?i:'s|'t|...) without (?i): each letter as the class of its simple case
// folding variants (Rust's (?i) rule; 's' also matches U+017F).
std::string caseless(std::string_view word) {
  std::string out = "'";
  for (const char c : word) {
    CodePoints v;
    for (const char32_t cp : unicode::case_variants(c)) v.push_back({cp, cp});
    out += pcre2_class("[", normalized(std::move(v)));
  }
  return out;
}

// The sets of code points the Kimi pattern's classes are made of, from the Unicode tables; one
// source for the PCRE2 pattern and for the hand-written matcher below.
struct KimiSets {
  CodePoints han, upper, lower, letter_number, number, space;
};

const KimiSets& kimi_sets() {
  static const KimiSets sets = [] {
    using P = unicode::Property;
    KimiSets k;
    k.han = union_of({P::Han});
    // [X&&[^\p{Han}]] is a set difference, computed here rather than as a look-ahead.
    k.upper = minus(union_of({P::Lu, P::Lt, P::Lm, P::Lo, P::M}), k.han);
    k.lower = minus(union_of({P::Ll, P::Lm, P::Lo, P::M}), k.han);
    k.letter_number = union_of({P::Lu, P::Ll, P::Lt, P::Lm, P::Lo, P::N});
    k.number = union_of({P::N});
    k.space = union_of({P::WhiteSpace});
    return k;
  }();
  return sets;
}

CodePoints unite(CodePoints a, const CodePoints& b) {
  a.insert(a.end(), b.begin(), b.end());
  return normalized(std::move(a));
}

// Each code point's classes in the Kimi pattern as bits, in a two-stage table: the 256-code-point
// blocks that are alike (most of the code space) are stored once.
enum ClassBit : uint8_t {
  kIsHan = 1, kIsUpper = 2, kIsLower = 4, kIsLetterNumber = 8, kIsNumber = 16, kIsSpace = 32, kIsCrLf = 64, kIsEnd = 128
};

class ClassTable {
 public:
  ClassTable() {
    const KimiSets& k = kimi_sets();
    std::vector<uint8_t> all(0x110000, 0);
    const auto mark = [&](const CodePoints& set, uint8_t bit) {
      for (const unicode::Range& r : set)
        for (char32_t c = r.first; c <= r.last; ++c) all[c] |= bit;
    };
    mark(k.han, kIsHan);
    mark(k.upper, kIsUpper);
    mark(k.lower, kIsLower);
    mark(k.letter_number, kIsLetterNumber);
    mark(k.number, kIsNumber);
    mark(k.space, kIsSpace);
    mark({{'\n', '\n'}, {'\r', '\r'}}, kIsCrLf);
    std::map<std::string_view, uint16_t> seen;
    index_.resize(0x1100);
    for (size_t b = 0; b < index_.size(); ++b) {
      const std::string_view block(reinterpret_cast<const char*>(all.data()) + b * 256, 256);
      const auto [it, fresh] = seen.emplace(block, uint16_t(seen.size()));
      if (fresh) blocks_.insert(blocks_.end(), block.begin(), block.end());
      index_[b] = it->second;
    }
  }
  uint8_t at(char32_t cp) const { return blocks_[size_t(index_[cp >> 8]) * 256 + (cp & 0xFF)]; }

 private:
  std::vector<uint16_t> index_;
  std::vector<uint8_t> blocks_;
};

const ClassTable& class_table() {
  static const ClassTable t;
  return t;
}

// The code point at t[k] of valid UTF-8, and the length of its sequence.
inline char32_t decode_valid(std::string_view t, size_t k, size_t& len) {
  const auto b = [&](size_t j) { return char32_t(uint8_t(t[k + j])); };
  const char32_t b0 = b(0);
  if (b0 < 0x80) return len = 1, b0;
  if (b0 < 0xE0) return len = 2, (b0 & 0x1F) << 6 | (b(1) & 0x3F);
  if (b0 < 0xF0) return len = 3, (b0 & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
  return len = 4, (b0 & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
}

// The letter a..z that cp is a case variant of, among the contractions' letters; 0 for none.
char contraction_letter(char32_t cp) {
  if (cp < 0x80) return char(cp | 0x20);  // ASCII: its lower case (non-letters never compare equal)
  static const std::vector<std::pair<char32_t, char>> others = [] {
    std::vector<std::pair<char32_t, char>> v;
    for (const char c : std::string_view("strevmld"))
      for (const char32_t cp2 : unicode::case_variants(c))
        if (cp2 >= 0x80) v.emplace_back(cp2, c);
    return v;
  }();
  for (const auto& [c, letter] : others)
    if (c == cp) return letter;
  return 0;
}

// The Kimi pattern written out: the end of the piece that starts at t[i] in the valid UTF-8
// stretch t[.. end), as the backtracking engines (PCRE2, fancy-regex) find it, or npos where
// this matcher cannot decide (then PCRE2 matches from the same place). It costs a table lookup
// per character instead of a PCRE2 call per piece, whose classes of thousands of explicit ranges
// are scanned one range after another. Tests compare the two on random text.
class KimiMatcher {
 public:
  KimiMatcher(std::string_view t, size_t end) : t_(t), end_(end), table_(class_table()) {}

  size_t piece(size_t i) const {
    size_t n0;
    const uint8_t c0 = at(i, n0);
    // 1: [\p{Han}]+
    if (c0 & kIsHan) return run(n0, kIsHan);
    // 2 and 3: [^\r\n\p{L}\p{N}]? then upper* lower+ (2) or upper+ lower* (3), then a
    // contraction. Each tries the optional first character taken, then not.
    size_t starts[2];
    int n_starts = 0;
    if (!(c0 & (kIsLetterNumber | kIsCrLf))) starts[n_starts++] = n0;
    starts[n_starts++] = i;
    for (int a = 0; a < n_starts; ++a) {
      // upper* runs to j; lower+ then starts at the last position k <= j whose character is
      // lower (giving back characters of the upper run that are both, i.e. Lm, Lo, M).
      const size_t s = starts[a];
      size_t k = s, last_both = std::string_view::npos, next;
      uint8_t c;
      while ((c = at(k, next)) & kIsUpper) {
        if (c & kIsLower) last_both = k;
        k = next;
      }
      if (!(c & kIsLower)) k = last_both;
      if (k != std::string_view::npos) return contraction(run(k, kIsLower));
    }
    for (int a = 0; a < n_starts; ++a) {
      const size_t s = starts[a], j = run(s, kIsUpper);
      if (j > s) return contraction(run(j, kIsLower));
    }
    // 4: \p{N}{1,3}
    if (c0 & kIsNumber) {
      size_t k = n0, next;
      for (int n = 1; n < 3 && (at(k, next) & kIsNumber); ++n) k = next;
      return k;
    }
    // 5: " ?[^\s\p{L}\p{N}]+[\r\n]*"
    for (const size_t s : {t_[i] == ' ' ? n0 : i, i}) {
      size_t k = s, next;
      while (!(at(k, next) & (kIsSpace | kIsLetterNumber | kIsEnd))) k = next;
      if (k > s) return run(k, kIsCrLf);
    }
    // 6-8 on a whitespace run: up to its last CR/LF (6); else all of it at the end of the text, or
    // all but its last character when that is more than one (7); else the one (8).
    if (c0 & kIsSpace) {
      size_t k = i, last = i, after_newline = std::string_view::npos, next;
      for (uint8_t c; (c = at(k, next)) & kIsSpace; k = next) {
        if (c & kIsCrLf) after_newline = next;
        last = k;
      }
      if (after_newline != std::string_view::npos) return after_newline;
      return k >= end_ || last == i ? k : last;
    }
    return std::string_view::npos;
  }

 private:
  // The classes of the character at t[k] (kIsEnd at the end), and where the next one starts.
  uint8_t at(size_t k, size_t& next) const {
    if (k >= end_) return next = k, uint8_t(kIsEnd);
    size_t len;
    const char32_t cp = decode_valid(t_, k, len);
    next = k + len;
    return table_.at(cp);
  }
  size_t run(size_t k, uint8_t bits) const {
    for (size_t next; at(k, next) & bits;) k = next;
    return k;
  }
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)? at t[e]: where it ends (e when there is none).
  size_t contraction(size_t e) const {
    if (e >= end_ || t_[e] != '\'') return e;
    size_t k = e + 1, len;
    if (k >= end_) return e;
    const char l1 = contraction_letter(decode_valid(t_, k, len));
    k += len;
    if (l1 == 's' || l1 == 't' || l1 == 'm' || l1 == 'd') return k;
    if (l1 != 'r' && l1 != 'v' && l1 != 'l') return e;
    if (k >= end_) return e;
    const char l2 = contraction_letter(decode_valid(t_, k, len));
    return l2 == (l1 == 'l' ? 'l' : 'e') ? k + len : e;
  }

  std::string_view t_;
  size_t end_;
  const ClassTable& table_;
};

}  // namespace

const std::string& PreTokenizer::kimi_pattern() {
  // The alternatives of kimi_pattern_original(), each property class written out from the
  // Unicode tables (unicode_tables.h) as explicit ranges, so that PCRE2's own Unicode data is
  // never consulted; the rewrite of && and \s is the one the header explains.
  static const std::string p = [] {
    const KimiSets& k = kimi_sets();
    const std::string upper = pcre2_class("[", k.upper), lower = pcre2_class("[", k.lower);
    const std::string not_crlf_letter_number = pcre2_class("[^", unite(k.letter_number, {{'\n', '\n'}, {'\r', '\r'}}));
    const std::string han = pcre2_class("[", k.han), number = pcre2_class("[", k.number);
    const std::string s = pcre2_class("[", k.space), not_s = pcre2_class("[^", k.space);
    const std::string not_s_letter_number = pcre2_class("[^", unite(k.letter_number, k.space));
    std::string contractions = "(?:";
    for (const char* w : {"s", "t", "re", "ve", "m", "ll", "d"}) {  // in the pattern's order
      if (contractions.size() > 3) contractions += '|';
      contractions += caseless(w);
    }
    contractions += ")?";
    std::string out;
    for (const std::string_view part : std::initializer_list<std::string_view>{
             han, "+",
             "|", not_crlf_letter_number, "?", upper, "*", lower, "+", contractions,
             "|", not_crlf_letter_number, "?", upper, "+", lower, "*", contractions,
             "|", number, "{1,3}",
             "| ?", not_s_letter_number, "+[\\r\\n]*",
             "|", s, "*[\\r\\n]+",
             "|", s, "+(?!", not_s, ")",
             "|", s, "+"})
      out += part;
    return out;
  }();
  return p;
}

namespace {

// A compiled pattern; read-only once made, so PreTokenizers may share it across threads.
struct Compiled {
  std::unique_ptr<pcre2_code, CodeFree> code;
  bool jit = false;
};

std::shared_ptr<const Compiled> compile(const std::string& pattern) {
  auto c = std::make_shared<Compiled>();
  int err = 0;
  PCRE2_SIZE offset = 0;
  c->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr));
  if (!c->code)
    throw Error("pre-tokenizer pattern does not compile at offset " + std::to_string(offset) + ": " +
                pcre2_message(err));
  // JIT is an optimisation only: where the platform lacks it the interpreter gives the same matches.
  c->jit = pcre2_jit_compile(c->code.get(), PCRE2_JIT_COMPLETE) == 0;
  return c;
}

}  // namespace

struct PreTokenizer::Impl {
  std::string pattern;
  std::shared_ptr<const Compiled> compiled;
  bool kimi_matcher = false;  // only for Kimi's pattern, which KimiMatcher implements
};

// Kimi's pattern is compiled once per process (its ~100 KB of ranges take milliseconds to compile
// and JIT), then shared by every default PreTokenizer; so is KimiMatcher's table.
PreTokenizer::PreTokenizer() : impl_(std::make_unique<Impl>()) {
  static const std::shared_ptr<const Compiled> kimi = compile(kimi_pattern());
  impl_->pattern = kimi_pattern();
  impl_->compiled = kimi;
  impl_->kimi_matcher = true;
  class_table();  // built here (once, a few ms), not inside the first encode
}

PreTokenizer::PreTokenizer(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  impl_->pattern = pattern;
  impl_->compiled = compile(pattern);
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

const std::string& PreTokenizer::pattern() const { return impl_->pattern; }
bool PreTokenizer::jit() const { return impl_->compiled->jit; }

struct PreTokenizer::Cursor::State {
  const Impl* impl = nullptr;
  std::string_view text;
  size_t pos = 0;
  size_t seg_begin = 0, seg_end = 0;  // the valid UTF-8 stretch being matched
  size_t held_begin = 0, held_end = 0;  // a match found behind an unmatched gap, returned next
  std::unique_ptr<pcre2_match_data, MatchDataFree> md;
  // Made only when a match overflows the JIT's default 32 KiB stack (very long pieces).
  std::unique_ptr<pcre2_match_context, MatchContextFree> mctx;
  std::unique_ptr<pcre2_jit_stack, JitStackFree> jit_stack;
};

PreTokenizer::Cursor::Cursor(const PreTokenizer& owner, std::string_view text) : s_(std::make_unique<State>()) {
  s_->impl = owner.impl_.get();
  s_->text = text;
  s_->md.reset(pcre2_match_data_create_from_pattern(s_->impl->compiled->code.get(), nullptr));
  if (!s_->md) throw std::bad_alloc();
}

PreTokenizer::Cursor::~Cursor() = default;
PreTokenizer::Cursor::Cursor(Cursor&&) noexcept = default;

bool PreTokenizer::Cursor::next(std::string_view& piece) {
  State& s = *s_;
  if (s.held_end > s.held_begin) {
    piece = s.text.substr(s.held_begin, s.held_end - s.held_begin);
    s.held_begin = s.held_end = 0;
    return true;
  }
  const std::string_view text = s.text;
  if (s.pos >= text.size()) return false;
  if (s.pos >= s.seg_end) {
    const size_t valid = utf8::valid_prefix(text.substr(s.pos));
    if (valid == 0) {
      // A run of invalid bytes: one piece, up to where a valid character starts.
      size_t j = s.pos;
      while (j < text.size()) {
        const utf8::Decoded d = utf8::decode_one(text, j);
        if (d.status == utf8::Status::Ok) break;
        j += d.len;
      }
      piece = text.substr(s.pos, j - s.pos);
      s.pos = s.seg_begin = s.seg_end = j;
      return true;
    }
    s.seg_begin = s.pos;
    s.seg_end = s.pos + valid;
  }
  if (s.impl->kimi_matcher) {
    size_t end = 0;
    if (uint8_t(text[s.pos]) >= 0x80 || !ascii_piece(text, s.pos, s.seg_end, end))
      end = KimiMatcher(text, s.seg_end).piece(s.pos);
    if (end != std::string_view::npos) {
      piece = text.substr(s.pos, end - s.pos);
      s.pos = end;
      return true;
    }
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + s.seg_begin);
  const size_t len = s.seg_end - s.seg_begin, start = s.pos - s.seg_begin;
  // The stretch was validated above, so PCRE2 need not re-check it on every call.
  int rc = pcre2_match(s.impl->compiled->code.get(), subject, len, start, PCRE2_NO_UTF_CHECK, s.md.get(), s.mctx.get());
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s.jit_stack) {
    s.mctx.reset(pcre2_match_context_create(nullptr));
    s.jit_stack.reset(pcre2_jit_stack_create(256 * 1024, 1024 * 1024 * 1024, nullptr));
    if (!s.mctx || !s.jit_stack) throw std::bad_alloc();
    pcre2_jit_stack_assign(s.mctx.get(), nullptr, s.jit_stack.get());
    rc = pcre2_match(s.impl->compiled->code.get(), subject, len, start, PCRE2_NO_UTF_CHECK, s.md.get(), s.mctx.get());
  }
  if (rc == PCRE2_ERROR_NOMATCH) {
    piece = text.substr(s.pos, s.seg_end - s.pos);
    s.pos = s.seg_end;
    return true;
  }
  if (rc < 0) throw Error("pre-tokenizer: PCRE2 match failed: " + pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md.get());
  const size_t m_begin = s.seg_begin + ov[0];
  size_t m_end = s.seg_begin + ov[1];
  // An empty match (possible with a custom pattern, never with Kimi's) takes one character so
  // that the walk always advances.
  if (m_end == m_begin && m_end < s.seg_end) m_end += utf8::decode_one(text, m_end).len;
  if (m_begin > s.pos) {
    // Text the pattern skipped (only a custom pattern that does not cover every character).
    piece = text.substr(s.pos, m_begin - s.pos);
    s.held_begin = m_begin, s.held_end = m_end;
    s.pos = m_end;
    return true;
  }
  if (m_end == m_begin) {  // empty match at the end of the stretch: nothing left in it
    s.pos = s.seg_end;
    return next(piece);
  }
  piece = text.substr(m_begin, m_end - m_begin);
  s.pos = m_end;
  return true;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> out;
  Cursor c = pieces(text);
  for (std::string_view p; c.next(p);) out.push_back(p);
  return out;
}

}  // namespace kimi
