#include "bench/raster.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "bench/bitmap_font.h"
#include "common/error.h"

namespace kimi {

Canvas::Canvas(int width, int height, Rgb bg) : w_(width), h_(height) {
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384) throw Error("canvas size out of range");
  px_.resize(size_t(w_) * size_t(h_) * 3);
  for (size_t i = 0; i < px_.size(); i += 3) px_[i] = bg.r, px_[i + 1] = bg.g, px_[i + 2] = bg.b;
}

Rgb Canvas::get(int x, int y) const {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return {};
  const size_t i = (size_t(y) * size_t(w_) + size_t(x)) * 3;
  return {px_[i], px_[i + 1], px_[i + 2]};
}

void Canvas::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  const size_t i = (size_t(y) * size_t(w_) + size_t(x)) * 3;
  px_[i] = c.r, px_[i + 1] = c.g, px_[i + 2] = c.b;
}

void Canvas::fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
  if (x0 > x1) std::swap(x0, x1);
  if (y0 > y1) std::swap(y0, y1);
  for (int y = std::max(y0, 0); y <= std::min(y1, h_ - 1); ++y)
    for (int x = std::max(x0, 0); x <= std::min(x1, w_ - 1); ++x) set(x, y, c);
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c, int thickness) {
  // Bresenham, stamping a thickness x thickness square at every step.
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  const int lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (int err = dx + dy;;) {
    fill_rect(x0 + lo, y0 + lo, x0 + hi, y0 + hi, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

int Canvas::text_width(std::string_view s, int scale) {
  return s.empty() ? 0 : (int(s.size()) * kGlyphAdvance - 1) * scale;
}

void Canvas::text(int x, int y, std::string_view s, Rgb c, int scale, bool vertical) {
  for (size_t k = 0; k < s.size(); ++k) {
    const auto bits = glyph_bits(s[k]);
    for (int gy = 0; gy < kGlyphHeight; ++gy)
      for (int gx = 0; gx < kGlyphWidth; ++gx) {
        if (!bits[size_t(gy * kGlyphWidth + gx)]) continue;
        const int along = int(k) * kGlyphAdvance + gx;  // position along the text
        // Vertical text is the horizontal text turned 90 degrees anticlockwise; (x, y) is
        // then the top-left corner of its bounding box too.
        const int px = vertical ? x + gy * scale : x + along * scale;
        const int py = vertical ? y + (text_width(s, 1) - 1 - along) * scale : y + gy * scale;
        fill_rect(px, py, px + scale - 1, py + scale - 1, c);
      }
  }
}

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(0L, out.data() + start, uInt(out.size() - start));  // over type and data
  put_u32(out, uint32_t(crc));
}

}  // namespace

std::vector<uint8_t> encode_png(const Canvas& canvas) {
  const size_t stride = size_t(canvas.width()) * 3;
  std::vector<uint8_t> raw;  // each scanline: filter type 0 (none), then its RGB bytes
  raw.reserve((stride + 1) * size_t(canvas.height()));
  for (int y = 0; y < canvas.height(); ++y) {
    raw.push_back(0);
    const auto row = canvas.rgb().begin() + std::ptrdiff_t(size_t(y) * stride);
    raw.insert(raw.end(), row, row + std::ptrdiff_t(stride));
  }
  uLongf zlen = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(zlen);
  if (compress2(z.data(), &zlen, raw.data(), uLong(raw.size()), Z_BEST_COMPRESSION) != Z_OK)
    throw Error("PNG: zlib compression failed");
  z.resize(zlen);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, uint32_t(canvas.width()));
  put_u32(ihdr, uint32_t(canvas.height()));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, truecolour RGB, deflate, adaptive filters, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});
  return png;
}

void write_png(const std::filesystem::path& path, const Canvas& canvas) {
  const std::vector<uint8_t> png = encode_png(canvas);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error("cannot write '" + path.string() + "'");
  out.write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  if (!out) throw Error("cannot write '" + path.string() + "'");
}

}  // namespace kimi
