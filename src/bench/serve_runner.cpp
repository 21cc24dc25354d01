#include "bench/serve_runner.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <thread>

#include "bench/serve_arrivals.h"

namespace kimi {

namespace {

// A one-line bar on stderr, redrawn as requests finish (only when stderr is a terminal).
class ProgressBar {
 public:
  ProgressBar(size_t total, bool enabled) : total_(total), enabled_(enabled && isatty(STDERR_FILENO)) { draw(0, 0); }
  void draw(size_t done, double seconds) const {
    if (!enabled_) return;
    constexpr size_t kWidth = 40;
    const size_t filled = total_ ? done * kWidth / total_ : kWidth;
    std::fprintf(stderr, "\r%3zu%%|%s%s| %zu/%zu [%.1fs]", total_ ? done * 100 / total_ : 100,
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(), done, total_, seconds);
    std::fflush(stderr);
  }
  void close() const {
    if (enabled_) std::fputc('\n', stderr);
  }

 private:
  size_t total_;
  bool enabled_;
};

}  // namespace

ServeRun run_serve_load(const ServeClientConfig& client, const std::vector<ServeRequest>& requests,
                        const ServeRunOptions& options) {
  using clock = std::chrono::steady_clock;
  const std::vector<double> arrivals = arrival_times(requests.size(), options.request_rate, options.burstiness, options.seed);
  const size_t limit = options.max_concurrency > 0 ? size_t(options.max_concurrency) : requests.size();
  ServeRun run;
  run.outcomes.resize(requests.size());

  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0, done = 0, sent = 0;
  const ProgressBar bar(requests.size(), options.progress);
  std::vector<std::thread> threads;
  threads.reserve(requests.size());
  const clock::time_point start = clock::now();
  const auto since_start = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  const bool bounded = options.max_duration_s > 0;
  const clock::time_point stop_issuing = start + std::chrono::microseconds(int64_t(options.max_duration_s * 1e6));

  for (size_t i = 0; i < requests.size(); ++i) {
    const clock::time_point at = start + std::chrono::microseconds(int64_t(arrivals[i] * 1e6));
    if (bounded && at >= stop_issuing) break;
    std::this_thread::sleep_until(at);
    std::unique_lock<std::mutex> lock(mu);
    const auto slot_free = [&] { return in_flight < limit; };
    if (!bounded) cv.wait(lock, slot_free);
    else if (!cv.wait_until(lock, stop_issuing, slot_free)) break;
    ++in_flight;
    ++sent;
    lock.unlock();
    const auto finish = [&, i](ServeOutcome o) {
      std::lock_guard<std::mutex> g(mu);
      run.outcomes[i] = std::move(o);
      --in_flight;
      bar.draw(++done, since_start());
      cv.notify_all();
    };
    try {
      threads.emplace_back([&, i, finish] { finish(send_streaming_request(client, requests[i], start)); });
    } catch (const std::system_error& e) {  // out of threads: this request fails, the run goes on
      ServeOutcome o;
      o.start_time = since_start();
      o.prompt_len = requests[i].prompt_len;
      o.error = std::string("cannot start a client thread: ") + e.what();
      finish(std::move(o));
    }
  }
  for (std::thread& t : threads) t.join();
  run.duration = since_start();
  bar.close();
  run.outcomes.resize(sent);
  return run;
}

}  // namespace kimi
