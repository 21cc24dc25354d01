#pragma once
// Drives a `kimi bench serve` run: issues the requests at their arrival times (serve_arrivals.h),
// at most --max-concurrency in flight (later arrivals wait for a slot, as vLLM's semaphore makes
// them), one client thread per request in flight, and gathers the outcomes in request order.
// --max-duration stops issuing new requests once that many seconds have passed; requests in
// flight then run to their end (each is bounded by the client's request timeout).
#include <cstdint>
#include <limits>
#include <vector>

#include "bench/serve_client.h"

namespace kimi {

struct ServeRunOptions {
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int64_t max_concurrency = 0;  // 0: no limit but the number of prompts
  double max_duration_s = 0;    // 0: no limit
  uint64_t seed = 0;
  bool progress = true;  // a progress bar on stderr when it is a terminal
};

struct ServeRun {
  std::vector<ServeOutcome> outcomes;  // one per request issued, in request order
  double duration = 0;                 // seconds from the start to the last request's end
};

ServeRun run_serve_load(const ServeClientConfig& client, const std::vector<ServeRequest>& requests,
                        const ServeRunOptions& options);

}  // namespace kimi
