#pragma once
// Safetensors: an 8-byte little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the raw tensor bytes. Reading memory-maps the file and
// hands out views into it; nothing is copied.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/mapped_file.h"

namespace kimi {

// A tensor inside a mapped checkpoint file. `data` stays valid while its file is open.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
  std::filesystem::path file;  // for error messages

  int64_t numel() const;
  std::string shape_string() const;  // "[576, 7168]"
};

// "[576, 7168]"; "[]" for a scalar. Shared by every error message that prints a shape.
std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps and validates the whole header: sane header length, valid JSON, known dtypes,
  // offsets inside the data section and consistent with dtype x shape. Any violation
  // (including a truncated file) throws kimi::Error naming the file and, where it applies, the tensor.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::map<std::string, TensorView, std::less<>>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;  // nullptr if absent
  const nlohmann::json& metadata() const { return metadata_; }  // "__metadata__" or empty object
  const std::filesystem::path& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView, std::less<>> tensors_;
  nlohmann::json metadata_;
};

// What the writer needs to know about one tensor before any bytes are written; `fill` is asked
// for the bytes (exactly numel x dtype_size of them) when the writer reaches the tensor, so a
// large checkpoint is produced without holding it all in memory.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::function<void(std::span<std::byte>)> fill;
};

// Writes one .safetensors file (header padded with spaces to a multiple of 8 bytes, tensors in
// the given order). Throws kimi::Error on I/O failure.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& tensors,
                       const nlohmann::json& metadata = nlohmann::json::object());

// Writes a checkpoint's weights into `dir`: a single model.safetensors when everything fits in
// max_shard_bytes, otherwise shards named model-00001-of-000003.safetensors (5-digit index,
// 6-digit total, as the Kimi-K2.5 repository names them) plus model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {name: file}}). Tensors keep their order.
void write_sharded_checkpoint(const std::filesystem::path& dir, const std::vector<TensorSpec>& tensors,
                              size_t max_shard_bytes);

}  // namespace kimi
