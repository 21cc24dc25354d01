#pragma once
// Code-point helpers for the template interpreter. Python strings index, slice, count and case-map
// by code point, so the interpreter decodes UTF-8 where the answer depends on it.
#include <cstdint>
#include <string>
#include <string_view>

namespace kimi::jinja::unicode {

// Invalid bytes decode to U+DC80..U+DCFF (Python's "surrogateescape") and encode back to the same
// byte, so decode + encode never loses or alters data.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
size_t length(std::string_view s);

bool is_space(char32_t c);      // Python str.isspace
bool is_linebreak(char32_t c);  // the separators of Python str.splitlines
bool is_digit(char32_t c);      // ASCII and other common decimal digits
bool is_alpha(char32_t c);      // letters: ASCII, Latin-1, Greek, Cyrillic, CJK and other scripts (approximate)
bool is_alnum(char32_t c);
bool is_word(char32_t c);       // Python's \w: alphanumerics and '_'

// Simple one-to-one case mapping for ASCII, Latin-1, Greek and Cyrillic; other code points are unchanged.
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_upper(char32_t c);
bool is_lower(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);

}  // namespace kimi::jinja::unicode
