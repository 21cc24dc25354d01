#include <cstdio>
#include <string>

#include "args.h"
#include "bench/latency.h"
#include "common/error.h"

namespace kimi::cli {

int run_bench(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) != "latency") {
    std::fprintf(stderr, "usage: kimi bench latency --model DIR [options]   (see --help)\n");
    return 1;
  }
  const Args a(argc, argv, 3, {"model", "input-len", "output-len", "num-iters", "threads", "seed"}, {"help"});
  if (a.has("help")) {
    std::printf(
        "usage: kimi bench latency --model DIR [--input-len 128] [--output-len 64] [--num-iters 3]\n"
        "                          [--threads N] [--seed S]\n\n"
        "Times the prefill of one random prompt and greedy decoding after it (best of --num-iters),\n"
        "and reports each as a fraction of this machine's limits measured in the same run: decode\n"
        "against memory read bandwidth, prefill against the matmul kernel's peak.\n");
    return 0;
  }
  ModelOptions mo;
  mo.num_threads = int(a.get_int("threads", 0));
  Model model(a.require("model"), mo);
  LatencyOptions o;
  o.input_len = a.get_int("input-len", o.input_len);
  o.output_len = a.get_int("output-len", o.output_len);
  o.iterations = int(a.get_int("num-iters", o.iterations));
  o.seed = uint64_t(a.get_int("seed", 0));
  const LatencyResult r = run_latency_bench(model, o);
  std::fputs(format_latency_report(model, o, r).c_str(), stdout);
  return 0;
}

}  // namespace kimi::cli
