#pragma once
// A Hugging Face model directory's weights: model.safetensors, or the shards listed in
// model.safetensors.index.json. Tensors are looked up by their published names.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/safetensors.h"

namespace kimi {

class Checkpoint {
 public:
  // Opens every shard (index file preferred; else model.safetensors; else all *.safetensors
  // in the directory). Errors name the directory or the shard: missing files, a tensor the
  // index lists but its shard lacks, the same tensor in two shards.
  explicit Checkpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const TensorView* find(std::string_view name) const;  // nullptr if absent
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // Throws kimi::Error("<dir>: tensor 'NAME' not found") when absent.
  const TensorView& get(std::string_view name) const;
  // As get(), and checks the shape: "<shard file>: tensor 'NAME' has shape [a, b], expected
  // [c, d] (from config.json)".
  const TensorView& get(std::string_view name, const std::vector<int64_t>& expected_shape) const;
  std::vector<std::string> names() const;  // sorted
  size_t num_tensors() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*, std::less<>> index_;
};

}  // namespace kimi
