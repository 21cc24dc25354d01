#pragma once
// The MLA key/value cache in its compressed form: per layer and token, the normalised
// kv_lora_rank latent followed by the rotated rope key (576 floats for Kimi-K2.5) instead of
// full keys and values for every head. Rows live in fixed-size blocks of a KvStorage; a
// sequence reaches its rows through its block table (KvView), so the serving engine can page
// blocks between sequences and share prefix blocks, while a single sequence can simply own
// one block as large as its context (KvCache).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "format/model_config.h"

namespace kimi {

// One sequence's cache as attention sees it.
struct KvView {
  float* storage = nullptr;  // [layers][num_blocks][block_size][row_width]
  int64_t layer_stride = 0;  // floats per layer
  int64_t block_size = 0;
  int64_t row_width = 0;
  std::span<const int32_t> block_table;  // the sequence's blocks, in position order
  int64_t length = 0;                    // tokens already cached; a step appends after them

  int64_t capacity() const { return int64_t(block_table.size()) * block_size; }
  float* row(int64_t layer, int64_t pos) const {
    const int64_t block = block_table[size_t(pos / block_size)];
    return storage + layer * layer_stride + (block * block_size + pos % block_size) * row_width;
  }
};

// Memory for num_blocks blocks of block_size tokens, all layers.
class KvStorage {
 public:
  KvStorage(const ModelConfig& c, int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t row_width() const { return row_width_; }
  size_t bytes() const { return size_ * sizeof(float); }
  static size_t bytes_per_block(const ModelConfig& c, int64_t block_size);
  KvView view(std::span<const int32_t> block_table, int64_t length) {
    return {data_.get(), num_blocks_ * block_size_ * row_width_, block_size_, row_width_, block_table, length};
  }

 private:
  int64_t num_blocks_, block_size_, row_width_;
  size_t size_;
  // Left uninitialised: every row is written before it is read, and untouched pages of a large
  // cache then cost no memory.
  std::unique_ptr<float[]> data_;
};

// A single sequence's cache with room for capacity_tokens (one block), for offline use:
// `kimi generate`, `kimi bench latency`, tests.
class KvCache {
 public:
  KvCache(const ModelConfig& c, int64_t capacity_tokens);

  int64_t capacity() const { return storage_.block_size(); }
  int64_t length() const { return length_; }
  void set_length(int64_t n);  // grow after a forward step, or shrink to drop a suffix
  KvView view() { return storage_.view(table_, length_); }
  size_t bytes() const { return storage_.bytes(); }

 private:
  KvStorage storage_;
  std::vector<int32_t> table_ = {0};
  int64_t length_ = 0;
};

}  // namespace kimi
