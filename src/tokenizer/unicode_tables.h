#pragma once
// The Unicode property tables the pre-tokeniser's character classes are made of: the general
// categories, the Han script, White_Space and the case-insensitive variants of ASCII letters, all
// of Unicode 16.0.0, generated into unicode_tables.cpp by scripts/gen_unicode_tables.mjs.
//
// Why our own tables: Kimi's pattern is run by tiktoken on Rust's regex-syntax tables (Unicode
// 16.0.0); PCRE2's \p{...} use PCRE2's own (Debian's 10.42: Unicode 14), so characters assigned
// since (CJK Ext-H/I, Nag Mundari, Garay...) were split differently. The pattern is built from
// these tables instead, as explicit code-point ranges, so it no longer depends on PCRE2's version.
#include <span>
#include <string>

namespace kimi::unicode {

struct Range {
  char32_t first, last;  // inclusive
};

enum class Property { Lu, Ll, Lt, Lm, Lo, M, N, Han, WhiteSpace };

const char* version();  // "16.0.0"
// The code points with the property, as sorted, disjoint, non-adjacent ranges.
std::span<const Range> ranges(Property p);
// The code points equal to ASCII letter `lower` (a..z) under simple case folding, the letter
// itself and its upper case included (for 's': s, S and U+017F LATIN SMALL LETTER LONG S).
std::u32string case_variants(char lower);

}  // namespace kimi::unicode
