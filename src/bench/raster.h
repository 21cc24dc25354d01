#pragma once
// A small RGB raster for charts: filled rectangles, thick lines, and text in the 5x7 bitmap font
// (scaled by whole pixels), plus its encoding as a PNG (8-bit RGB, no interlace, zlib deflate).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kimi {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return w_; }
  int height() const { return h_; }
  Rgb get(int x, int y) const;
  void set(int x, int y, Rgb c);  // outside the canvas: ignored
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners, any order
  void line(int x0, int y0, int x1, int y1, Rgb c, int thickness = 1);
  // Top-left corner at (x, y); `vertical` runs the text bottom to top (a y-axis label).
  void text(int x, int y, std::string_view s, Rgb c, int scale = 1, bool vertical = false);
  static int text_width(std::string_view s, int scale = 1);
  const std::vector<uint8_t>& rgb() const { return px_; }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

std::vector<uint8_t> encode_png(const Canvas& canvas);
void write_png(const std::filesystem::path& path, const Canvas& canvas);  // throws kimi::Error

}  // namespace kimi
