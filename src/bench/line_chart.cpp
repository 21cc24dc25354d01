#include "bench/line_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kimi {

namespace {

constexpr Rgb kBlack{0, 0, 0}, kGrid{225, 225, 225}, kGray{90, 90, 90};

std::string tick_text(double v, double step) {
  const int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step) - 1e-9));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct Box {
  int x0, y0, x1, y1;
  bool overlaps(const Box& o) const { return x0 <= o.x1 && o.x0 <= x1 && y0 <= o.y1 && o.y0 <= y1; }
};

// Each label beside its point of series[0], at the first of a few spots (below right, above
// right, left, then further out) that stays on the canvas and clear of the labels already
// placed, so that points close together (low request rates) keep readable labels.
void place_point_labels(Canvas& c, const ChartFrame& f, const LineChart& chart) {
  constexpr int kH = 7, kGap = 2;
  std::vector<Box> placed;
  for (size_t i = 0; i < chart.point_labels.size() && i < chart.series[0].points.size(); ++i) {
    const auto& [x, y] = chart.series[0].points[i];
    const std::string& label = chart.point_labels[i];
    const int w = Canvas::text_width(label, 1), px = f.px(x), py = f.py(y);
    std::vector<std::pair<int, int>> spots;
    for (int ring = 0; ring < 4; ++ring) {
      const int dy = 8 + ring * (kH + 4);
      spots.insert(spots.end(), {{px + 8, py + dy - 4}, {px + 8, py - dy - kH + 4}, {px - 8 - w, py + dy - 4},
                                 {px - 8 - w, py - dy - kH + 4}});
    }
    Box chosen{};
    bool found = false;
    for (const auto& [sx, sy] : spots) {
      const Box b{sx - kGap, sy - kGap, sx + w + kGap, sy + kH + kGap};
      if (b.x0 < 0 || b.y0 < 0 || b.x1 >= c.width() || b.y1 >= c.height()) continue;
      if (std::any_of(placed.begin(), placed.end(), [&](const Box& o) { return o.overlaps(b); })) continue;
      chosen = b, found = true;
      break;
    }
    if (!found) {  // crowded: the first spot, pulled onto the canvas
      const int sx = std::clamp(px + 8, 0, std::max(0, c.width() - w - 1));
      const int sy = std::clamp(py + 4, 0, std::max(0, c.height() - kH - 1));
      chosen = {sx - kGap, sy - kGap, sx + w + kGap, sy + kH + kGap};
    }
    placed.push_back(chosen);
    c.text(chosen.x0 + kGap, chosen.y0 + kGap, label, kGray, 1);
  }
}

}  // namespace

int ChartFrame::px(double x) const { return left + int(std::lround(x / x_max * double(right - left))); }
int ChartFrame::py(double y) const { return bottom - int(std::lround(y / y_max * double(bottom - top))); }

double nice_step(double max_value, int target_ticks) {
  if (!(max_value > 0) || !std::isfinite(max_value)) return 1;
  const double raw = max_value / target_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / mag;
  return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * mag;
}

ChartFrame draw_line_chart(Canvas& c, const LineChart& chart) {
  constexpr int kScale = 2;  // text is the 5x7 font doubled
  ChartFrame f;
  f.left = 100, f.top = 60, f.right = c.width() - 30, f.bottom = c.height() - 80;
  double xm = 0, ym = 0;
  for (const ChartSeries& s : chart.series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) xm = std::max(xm, x), ym = std::max(ym, y);
  const double xs = nice_step(xm * 1.05), ys = nice_step(ym * 1.1);
  f.x_max = std::max(xs, std::ceil(xm * 1.05 / xs) * xs);
  f.y_max = std::max(ys, std::ceil(ym * 1.1 / ys) * ys);

  // Grid and ticks.
  for (double v = 0; v <= f.x_max * (1 + 1e-9); v += xs) {
    const int x = f.px(v);
    c.line(x, f.top, x, f.bottom, kGrid);
    c.line(x, f.bottom, x, f.bottom + 6, kBlack);
    const std::string t = tick_text(v, xs);
    c.text(x - Canvas::text_width(t, kScale) / 2, f.bottom + 12, t, kBlack, kScale);
  }
  for (double v = 0; v <= f.y_max * (1 + 1e-9); v += ys) {
    const int y = f.py(v);
    c.line(f.left, y, f.right, y, kGrid);
    c.line(f.left - 6, y, f.left, y, kBlack);
    const std::string t = tick_text(v, ys);
    c.text(f.left - 10 - Canvas::text_width(t, kScale), y - 7, t, kBlack, kScale);
  }
  c.line(f.left, f.top, f.left, f.bottom, kBlack, 2);
  c.line(f.left, f.bottom, f.right, f.bottom, kBlack, 2);

  // Labels.
  c.text((c.width() - Canvas::text_width(chart.title, kScale)) / 2, 18, chart.title, kBlack, kScale);
  c.text((f.left + f.right - Canvas::text_width(chart.x_label, kScale)) / 2, f.bottom + 44, chart.x_label, kBlack, kScale);
  c.text(18, (f.top + f.bottom - Canvas::text_width(chart.y_label, kScale)) / 2, chart.y_label, kBlack, kScale, true);

  // Series, then markers on top of every line, then the legend.
  for (const ChartSeries& s : chart.series)
    for (size_t i = 1; i < s.points.size(); ++i)
      c.line(f.px(s.points[i - 1].first), f.py(s.points[i - 1].second), f.px(s.points[i].first),
             f.py(s.points[i].second), s.color, 3);
  for (const ChartSeries& s : chart.series)
    for (const auto& [x, y] : s.points) c.fill_rect(f.px(x) - 4, f.py(y) - 4, f.px(x) + 4, f.py(y) + 4, s.color);
  if (!chart.series.empty())
    place_point_labels(c, f, chart);
  int ly = f.top + 10;
  for (const ChartSeries& s : chart.series) {
    const int lx = f.right - 20 - Canvas::text_width(s.name, kScale) - 36;
    c.fill_rect(lx, ly + 5, lx + 26, ly + 8, s.color);
    c.text(lx + 34, ly, s.name, kBlack, kScale);
    ly += 24;
  }
  return f;
}

}  // namespace kimi
