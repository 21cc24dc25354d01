#include "bench/serve_plot.h"

#include <algorithm>
#include <cmath>

#include "bench/serve_metrics.h"

namespace kimi {

Canvas render_serve_plot(const std::vector<ServePlotPoint>& points, const ServePlotOptions& o, ChartFrame* frame) {
  std::vector<ServePlotPoint> sorted = points;  // a line from low to high load
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const ServePlotPoint& a, const ServePlotPoint& b) { return a.output_throughput < b.output_throughput; });
  LineChart chart;
  chart.title = o.title;
  chart.x_label = "output throughput (tok/s)";
  chart.y_label = o.metric + " (ms)";
  chart.width = o.width, chart.height = o.height;
  ChartSeries median{"median " + o.metric, kMedianColor, {}}, tail{o.tail + " " + o.metric, kTailColor, {}};
  for (const ServePlotPoint& p : sorted) {
    median.points.emplace_back(p.output_throughput, p.median_ms);
    tail.points.emplace_back(p.output_throughput, p.tail_ms);
    const std::string rate = python_float(p.request_rate);
    chart.point_labels.push_back((std::isinf(p.request_rate) ? std::string("inf") : rate.substr(0, rate.size() - (rate.ends_with(".0") ? 2 : 0))) + " req/s");
  }
  chart.series = {median, tail};
  Canvas canvas(o.width, o.height, Rgb{255, 255, 255});
  const ChartFrame f = draw_line_chart(canvas, chart);
  if (frame) *frame = f;
  return canvas;
}

void write_serve_plot(const std::filesystem::path& path, const std::vector<ServePlotPoint>& points,
                      const ServePlotOptions& options) {
  write_png(path, render_serve_plot(points, options));
}

}  // namespace kimi
