#pragma once
// GGUF (version 3), the file format of llama.cpp/ggml: "GGUF", version, tensor count, metadata
// count, the metadata key/value pairs, one info record per tensor (name, dims with ne[0] the
// fastest-varying, ggml type, offset into the data section), padding to the alignment, then
// the tensor data, each tensor starting at a multiple of the alignment. All little-endian.
//
// Tensor bytes are streamed: each tensor's producer is called when the writer reaches it and
// hands over its bytes in pieces, so a checkpoint of hundreds of GB is written with one piece
// in memory at a time.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace kimi {

// ggml tensor types this project writes (ggml.h's enum values).
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, BF16 = 30 };
size_t ggml_type_size(GgmlType t);
const char* ggml_type_name(GgmlType t);

// GGUF metadata value types (gguf.h's enum values).
enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};

inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint32_t kGgufDefaultAlignment = 32;

// Receives a tensor's bytes, in order, in pieces of any size.
using GgufSink = std::function<void(std::span<const std::byte>)>;

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the fastest-varying (a row's length)
  // Writes exactly nbytes() bytes through the sink; the writer checks the count.
  std::function<void(const GgufSink&)> produce;

  int64_t numel() const;
  uint64_t nbytes() const { return uint64_t(numel()) * ggml_type_size(type); }
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, std::vector<std::string> v);
  void add_i32_array(const std::string& key, std::vector<int32_t> v);
  // Throws kimi::Error on a duplicate name, an empty or over-long dims list, or a non-positive dim.
  void add_tensor(GgufTensor t);

  size_t num_kv() const { return kvs_.size(); }
  size_t num_tensors() const { return tensors_.size(); }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  // Writes the file (to a temporary name, renamed into place when complete, so a failed export
  // leaves no truncated file behind). Throws kimi::Error on I/O failure or a producer that
  // delivers the wrong number of bytes. Returns the file size.
  uint64_t write(const std::filesystem::path& path) const;

 private:
  using Value = std::variant<uint32_t, int32_t, uint64_t, float, bool, std::string, std::vector<std::string>,
                             std::vector<int32_t>>;
  struct Kv {
    std::string key;
    Value value;
  };
  void add(const std::string& key, Value v);

  uint32_t alignment_;
  std::vector<Kv> kvs_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace kimi
