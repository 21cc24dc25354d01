// The safetensors reader on fuzzer bytes (the whole file: 8-byte header length, JSON header,
// data). The file lives in a memfd, mapped through /proc/self/fd, so nothing touches the disk.
// Any input must either be rejected with kimi::Error or give tensors whose views lie inside the
// file's data section, hold exactly numel x dtype size bytes, and have non-negative dimensions;
// find() must agree with tensors(), and a view must be the bytes at the header's data_offsets. Any other exception escapes and counts as a crash.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/dtype.h"
#include "common/error.h"
#include "format/safetensors.h"
#include "fuzz_util.h"

namespace {

struct MemFile {
  int fd = memfd_create("kimi_fuzz_safetensors", 0);
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ~MemFile() { close(fd); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemFile file;
  if (file.fd < 0) kimi::fuzz::fail("memfd_create failed");
  if (ftruncate(file.fd, 0) != 0 || pwrite(file.fd, data, size, 0) != ssize_t(size)) kimi::fuzz::fail("memfd write");
  try {
    const kimi::SafetensorsFile st(file.path);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    const uint64_t data_begin = 8 + header_len;
    const auto header = nlohmann::json::parse(data + 8, data + data_begin);
    for (const auto& [name, t] : st.tensors()) {
      KIMI_FUZZ_CHECK(t.name == name, name);
      KIMI_FUZZ_CHECK(st.find(name) == &t, name);
      uint64_t numel = 1;
      bool overflow = false;
      for (int64_t d : t.shape) {
        KIMI_FUZZ_CHECK(d >= 0, name);
        overflow |= __builtin_mul_overflow(numel, uint64_t(d), &numel);
      }
      // A dimension of 0 makes any product of the others empty, but numel() must not overflow.
      if (!overflow) {
        KIMI_FUZZ_CHECK(uint64_t(t.numel()) == numel, name);
        KIMI_FUZZ_CHECK(t.data.size() == numel * kimi::dtype_size(t.dtype), name);
      }
      // The view must be the input's bytes at the header's data_offsets within the data section.
      const auto& offsets = header.at(name).at("data_offsets");
      const auto b = offsets.at(0).get<uint64_t>(), e = offsets.at(1).get<uint64_t>();
      KIMI_FUZZ_CHECK(b <= e && data_begin + e <= size && t.data.size() == e - b, name);
      KIMI_FUZZ_CHECK(t.data.empty() || std::memcmp(t.data.data(), data + data_begin + b, e - b) == 0, name);
    }
  } catch (const kimi::Error&) {
  }
  return 0;
}
