#include "tokenizer/jinja/unicode.h"

namespace kimi::jinja::unicode {

void append_utf8(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) {  // an escaped invalid byte: restore it
    out += char(c - 0xDC00);
  } else if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = uint8_t(s[i]);
    size_t n = 0;
    char32_t c = 0;
    if (b < 0x80) {
      out += char32_t(b);
      ++i;
      continue;
    }
    if ((b & 0xE0) == 0xC0) n = 1, c = b & 0x1F;
    else if ((b & 0xF0) == 0xE0) n = 2, c = b & 0x0F;
    else if ((b & 0xF8) == 0xF0) n = 3, c = b & 0x07;
    bool ok = n > 0 && i + n < s.size();
    if (ok) {
      for (size_t k = 1; k <= n; ++k) {
        const auto cb = uint8_t(s[i + k]);
        if ((cb & 0xC0) != 0x80) {
          ok = false;
          break;
        }
        c = (c << 6) | (cb & 0x3F);
      }
    }
    // Reject overlong forms, surrogates and values past U+10FFFF like a strict decoder.
    if (ok) {
      static constexpr char32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
      ok = c >= kMin[n] && c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
    }
    if (ok) {
      out += c;
      i += n + 1;
    } else {
      out += char32_t(0xDC00 + b);
      ++i;
    }
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) append_utf8(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t ascii = 0;
  for (const char c : s) {
    if (uint8_t(c) >= 0x80) return decode(s).size();
    ++ascii;
  }
  return ascii;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_linebreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

bool is_digit(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 0x660 && c <= 0x669) || (c >= 0x6F0 && c <= 0x6F9) ||
         (c >= 0x966 && c <= 0x96F) || (c >= 0xFF10 && c <= 0xFF19);
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c < 0x100) return c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7);
  if (is_space(c) || is_digit(c)) return false;
  // Punctuation, symbols and marks in the blocks text commonly uses are not letters; most other code points
  // of the BMP and beyond belong to scripts.
  if (c >= 0x2000 && c <= 0x2BFF) return false;  // punctuation, symbols, arrows, box drawing
  if (c >= 0x3000 && c <= 0x303F) return false;  // CJK punctuation
  if (c >= 0xFF00 && c <= 0xFF20) return false;  // fullwidth punctuation
  if (c >= 0xFF3B && c <= 0xFF40) return false;
  if (c >= 0xFF5B && c <= 0xFF65) return false;
  if (c >= 0xD800 && c <= 0xF8FF) return false;  // surrogates, private use
  if (c >= 0x1F000 && c <= 0x1FAFF) return false;  // emoji and symbols
  if (c >= 0xFE00 && c <= 0xFE0F) return false;  // variation selectors
  if (c >= 0x300 && c <= 0x36F) return false;  // combining marks
  return true;
}

bool is_alnum(char32_t c) { return is_alpha(c) || is_digit(c); }
bool is_word(char32_t c) { return c == '_' || is_alnum(c); }

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_upper(char32_t c) { return to_lower(c) != c; }
bool is_lower(char32_t c) { return to_upper(c) != c || c == 0xDF; }

namespace {
template <char32_t (*Map)(char32_t)>
std::string map_case(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool ascii = true;
  for (const char ch : s) ascii = ascii && uint8_t(ch) < 0x80;
  if (ascii) {
    for (const char ch : s) out += char(Map(char32_t(uint8_t(ch))));
    return out;
  }
  for (const char32_t c : decode(s)) append_utf8(out, Map(c));
  return out;
}
}  // namespace

std::string upper(std::string_view s) { return map_case<to_upper>(s); }
std::string lower(std::string_view s) { return map_case<to_lower>(s); }

}  // namespace kimi::jinja::unicode
