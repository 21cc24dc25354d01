#pragma once
// `kimi bench serve --request-rate 1,2,4,inf --plot FILE.png`: one point per request rate,
// output token throughput (x) against the median and a tail percentile of a latency metric
// (y), as two lines, each point labelled with its request rate.
#include <filesystem>
#include <string>
#include <vector>

#include "bench/line_chart.h"

namespace kimi {

struct ServePlotPoint {
  double request_rate = 0;       // inf: all at once
  double output_throughput = 0;  // tok/s
  double median_ms = 0, tail_ms = 0;
};

struct ServePlotOptions {
  std::string metric = "TPOT";  // TTFT, TPOT, ITL or E2EL
  std::string tail = "P99";
  std::string title = "kimi bench serve";
  int width = 800, height = 500;
};

inline constexpr Rgb kMedianColor{31, 119, 180}, kTailColor{214, 39, 40};

// Draws the chart; `frame` (when not null) receives where the data went.
Canvas render_serve_plot(const std::vector<ServePlotPoint>& points, const ServePlotOptions& options,
                         ChartFrame* frame = nullptr);
void write_serve_plot(const std::filesystem::path& path, const std::vector<ServePlotPoint>& points,
                      const ServePlotOptions& options);

}  // namespace kimi
