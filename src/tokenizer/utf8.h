#pragma once
// UTF-8 helpers the tokenizer shares: strict decoding of one sequence (Unicode table 3-7, so
// overlongs, surrogates and code points past U+10FFFF are invalid), replacement of invalid bytes
// by U+FFFD one per "maximal subpart" (what Python's errors="replace" and WHATWG decoders do), and
// Python's str.isspace, which the Kimi encoder uses to split long runs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kimi::utf8 {

enum class Status : uint8_t { Ok, Invalid, Incomplete };

struct Decoded {
  char32_t cp;     // the code point when Ok, else U+FFFD
  uint32_t len;    // bytes consumed: the sequence, or the maximal subpart that is invalid/incomplete
  Status status;
};

// Decodes the sequence starting at s[i] (i < s.size()). Invalid: s[i .. i+len) can never start a
// valid character (len >= 1). Incomplete: s[i ..] is a valid prefix cut off by the end of s.
inline Decoded decode_one(std::string_view s, size_t i) {
  const auto b0 = uint8_t(s[i]);
  if (b0 < 0x80) return {b0, 1, Status::Ok};
  uint32_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return {0xFFFD, 1, Status::Invalid};
  }
  size_t j = i + 1;
  for (uint32_t k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) return {0xFFFD, uint32_t(j - i), Status::Incomplete};
    const auto b = uint8_t(s[j]);
    if (b < lo || b > hi) return {0xFFFD, uint32_t(j - i), Status::Invalid};
    cp = (cp << 6) | (b & 0x3Fu);
    lo = 0x80, hi = 0xBF;
  }
  return {cp, uint32_t(j - i), Status::Ok};
}

// Length of the longest prefix of s that is valid UTF-8 (complete characters only).
inline size_t valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {  // ASCII fast path: most text is mostly ASCII
      ++i;
      continue;
    }
    const Decoded d = decode_one(s, i);
    if (d.status != Status::Ok) break;
    i += d.len;
  }
  return i;
}

inline bool is_valid(std::string_view s) { return valid_prefix(s) == s.size(); }

inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// s with every maximal invalid subpart (and a truncated tail) replaced by one U+FFFD.
inline std::string replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Decoded d = decode_one(s, i);
    if (d.status == Status::Ok)
      out.append(s.substr(i, d.len));
    else
      out.append(kReplacement);
    i += d.len;
  }
  return out;
}

// Python's str.isspace(): bidirectional class WS, B or S, or general category Zs. Differs from
// Unicode White_Space (the regex \s) by including U+001C..U+001F.
inline bool python_isspace(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace kimi::utf8
