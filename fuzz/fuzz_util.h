#pragma once
// Small helpers shared by the fuzz targets: a check that aborts with a message (libFuzzer then
// saves the input as a crash), and a reader that splits the fuzzer's bytes into choices and text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace kimi::fuzz {

[[noreturn]] inline void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz property violated: %s\n%s\n", what, detail.c_str());
  std::abort();
}

#define KIMI_FUZZ_CHECK(cond, detail) \
  do {                                \
    if (!(cond)) ::kimi::fuzz::fail(#cond, (detail)); \
  } while (0)

// Consumes the input from the front: bytes for choices, the rest as text.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : s_(reinterpret_cast<const char*>(data), size) {}
  uint8_t byte() {
    if (s_.empty()) return 0;
    const uint8_t b = uint8_t(s_.front());
    s_.remove_prefix(1);
    return b;
  }
  std::string_view take(size_t n) {
    const std::string_view t = s_.substr(0, n);
    s_.remove_prefix(t.size());
    return t;
  }
  std::string_view rest() const { return s_; }

 private:
  std::string_view s_;
};

}  // namespace kimi::fuzz
