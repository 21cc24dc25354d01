#pragma once
// A line chart on a Canvas: axes from 0 with "nice" ticks (1, 2 or 5 times a power of ten),
// grid, title, axis labels, a legend, one polyline with square markers per series, and an
// optional text label beside each point of the first series.
#include <string>
#include <utility>
#include <vector>

#include "bench/raster.h"

namespace kimi {

struct ChartSeries {
  std::string name;
  Rgb color;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in this order
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  std::vector<std::string> point_labels;  // beside series[0]'s points, when given
  int width = 800, height = 500;
};

// Where data lands on the canvas.
struct ChartFrame {
  int left = 0, top = 0, right = 0, bottom = 0;  // the plot area, in pixels
  double x_max = 1, y_max = 1;                  // the axes run from 0 to these
  int px(double x) const;
  int py(double y) const;
};

double nice_step(double max_value, int target_ticks = 5);
ChartFrame draw_line_chart(Canvas& canvas, const LineChart& chart);

}  // namespace kimi
