#pragma once
// Helpers shared by the test files: scratch directories and the tiny model they all use.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/rng.h"
#include "engine/sampling_params.h"
#include "model/model.h"
#include "modelgen/make_model.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace kimi::test {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("kimi-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Greedy sampling of exactly max_tokens tokens (EOS ignored), as the engine tests compare runs.
inline SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Writes the tiny preset (as `kimi make-model DIR --preset tiny`) into dir/name and returns it.
inline std::filesystem::path make_tiny_model(const TempDir& dir, const std::string& name = "tiny",
                                             MakeModelOptions options = {}) {
  const auto out = dir.path() / name;
  make_model(out, options);
  return out;
}

// A suite whose tests share one tiny model, made and loaded once for the suite.
class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    const auto path = make_tiny_model(*dir_);
    model_ = std::make_unique<Model>(path, ModelOptions{.num_threads = 2});
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(path));
  }
  static void TearDownTestSuite() {
    tokenizer_.reset();
    model_.reset();
    dir_.reset();
  }
  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<Model> model_;
  static inline std::unique_ptr<Tokenizer> tokenizer_;
};

// The committed trained model (models/mini), or KIMI_MINI_MODEL when set; empty when absent, so
// a test skips rather than fails on a checkout without it.
inline std::filesystem::path mini_model_dir() {
  const char* env = std::getenv("KIMI_MINI_MODEL");
  const std::filesystem::path dir = env && *env ? std::filesystem::path(env)
                                                : std::filesystem::path(KIMI_TEST_DATA_DIR) / ".." / ".." / "models" / "mini";
  return std::filesystem::exists(dir / "config.json") ? dir : std::filesystem::path();
}

// Runs f on a thread with a stack of `bytes` (the server's request threads get the default 8 MiB),
// so that unbounded recursion shows as a crash here rather than depending on the main thread's
// stack limit. Exceptions are reported as test failures.
inline void on_stack(size_t bytes, const std::function<void()>& f) {
  struct Call {
    const std::function<void()>* f;
    std::string error;
  } call{&f, {}};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        Call& c = *static_cast<Call*>(p);
        try {
          (*c.f)();
        } catch (const std::exception& e) {
          c.error = e.what();
        }
        return nullptr;
      },
      &call);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(rc, 0);
  pthread_join(thread, nullptr);
  EXPECT_EQ(call.error, "");
}

// What a run of the built `kimi` binary gave: its exit status (as the shell reports it: 128 + N
// for a child ended by signal N, 137 when the time limit killed it) and what it wrote to stdout
// (and stderr, unless discarded).
struct CmdResult {
  int status;
  std::string out;
};

struct RunOptions {
  bool keep_stderr = true;  // false: stderr goes to /dev/null (a --json line on stdout stays parseable)
  // Killed after this long, so a hung child fails its test with its output instead of reaching
  // the test's ctest limit (240 s), which would show nothing.
  int timeout_s = 200;
};

// Runs `kimi ARGS` through the shell (so ARGS may redirect stdin), capturing its output.
inline CmdResult run_kimi(const std::string& args, const RunOptions& opt = {}) {
  const std::string cmd = "timeout -s KILL " + std::to_string(opt.timeout_s) + " " + std::string(KIMI_BINARY) + " " +
                          args + (opt.keep_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "popen failed for: " << cmd;
    return {-1, ""};
  }
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// The ApiError that f throws; a test failure if it throws nothing or another type.
template <class F>
ApiError api_error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ApiError, got: " << e.what();
    return ApiError(0, "");
  }
  ADD_FAILURE() << "expected ApiError, nothing was thrown";
  return ApiError(0, "");
}

// The message of the kimi::Error that f throws; a test failure if it throws nothing or another type.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kimi::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected kimi::Error, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected kimi::Error, nothing was thrown";
  return {};
}

// Seconds of the steady clock since t.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// n standard-normal floats.
// x as the INT4 kernels take 16-bit activations as int16 (kernels::int4_word16_layout): per block
// of `block` inputs (64 on 8 lanes, 128 on 16), q = round-to-nearest-even(x * (32767 / amax))
// times amax / 32767, in double.
inline std::vector<double> int16_block_values(const float* x, int64_t cols, int64_t block = 64) {
  std::vector<double> v(static_cast<size_t>(cols));
  for (int64_t b = 0; b < cols; b += block) {
    const int64_t e = std::min<int64_t>(cols, b + block);
    float amax = 0.0f;
    for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = amax / 32767.0f, inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    for (int64_t i = b; i < e; ++i) v[size_t(i)] = std::nearbyint(x[i] * inv) * double(s);
  }
  return v;
}

inline std::vector<float> random_floats(size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal());
  return v;
}

}  // namespace kimi::test
