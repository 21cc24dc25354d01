#pragma once
// A 5x7 bitmap font for plot labels: digits, upper-case letters (lower case is drawn as upper
// case) and the punctuation axis labels need. Unknown characters draw as a hollow box.
#include <array>

namespace kimi {

constexpr int kGlyphWidth = 5, kGlyphHeight = 7, kGlyphAdvance = 6;

// Row-major: glyph[y * 5 + x] is true where the pixel is set.
std::array<bool, kGlyphWidth * kGlyphHeight> glyph_bits(char c);

}  // namespace kimi
