#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>

#include "common/error.h"
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

// The Kimi pattern on ASCII, written out. Most text is mostly ASCII, and deciding a piece here
// costs a few table lookups instead of a PCRE2 call. Returns false ("undecided") whenever the
// piece or the character that decides where it ends is not ASCII; PCRE2 then matches from the
// same place, so the result is the pattern's either way (tests compare the two on random text).
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

const std::string& PreTokenizer::kimi_pattern() {
  // The alternatives of kimi_pattern_original(), rewritten as the header explains.
  static const std::string p =
      R"(\p{sc:Han}+)"
      R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|\p{N}{1,3})"
      R"(| ?[^\p{White_Space}\p{L}\p{N}]+[\r\n]*)"
      R"(|\p{White_Space}*[\r\n]+)"
      R"(|\p{White_Space}+(?!\P{White_Space}))"
      R"(|\p{White_Space}+)";
  return p;
}

struct PreTokenizer::Impl {
  std::string pattern;
  std::unique_ptr<pcre2_code, CodeFree> code;
  bool jit = false;
  bool ascii_fast_path = false;  // only for Kimi's pattern, which ascii_piece() implements
};

PreTokenizer::PreTokenizer() : PreTokenizer(kimi_pattern()) { impl_->ascii_fast_path = true; }

PreTokenizer::PreTokenizer(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  impl_->pattern = pattern;
  int err = 0;
  PCRE2_SIZE offset = 0;
  impl_->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr));
  if (!impl_->code)
    throw Error("pre-tokenizer pattern does not compile at offset " + std::to_string(offset) + ": " +
                pcre2_message(err));
  // JIT is an optimisation only: where the platform lacks it the interpreter gives the same matches.
  impl_->jit = pcre2_jit_compile(impl_->code.get(), PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

const std::string& PreTokenizer::pattern() const { return impl_->pattern; }
bool PreTokenizer::jit() const { return impl_->jit; }

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
  s_->md.reset(pcre2_match_data_create_from_pattern(s_->impl->code.get(), nullptr));
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
  if (s.impl->ascii_fast_path && uint8_t(text[s.pos]) < 0x80) {
    size_t end = 0;
    if (ascii_piece(text, s.pos, s.seg_end, end)) {
      piece = text.substr(s.pos, end - s.pos);
      s.pos = end;
      return true;
    }
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + s.seg_begin);
  const size_t len = s.seg_end - s.seg_begin, start = s.pos - s.seg_begin;
  // The stretch was validated above, so PCRE2 need not re-check it on every call.
  int rc = pcre2_match(s.impl->code.get(), subject, len, start, PCRE2_NO_UTF_CHECK, s.md.get(), s.mctx.get());
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s.jit_stack) {
    s.mctx.reset(pcre2_match_context_create(nullptr));
    s.jit_stack.reset(pcre2_jit_stack_create(256 * 1024, 1024 * 1024 * 1024, nullptr));
    if (!s.mctx || !s.jit_stack) throw std::bad_alloc();
    pcre2_jit_stack_assign(s.mctx.get(), nullptr, s.jit_stack.get());
    rc = pcre2_match(s.impl->code.get(), subject, len, start, PCRE2_NO_UTF_CHECK, s.md.get(), s.mctx.get());
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
