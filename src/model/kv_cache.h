#pragma once
// The MLA key/value cache in its compressed form: per layer and token, the normalised
// kv_lora_rank latent followed by the rotated rope key (576 values for Kimi-K2.5) instead of
// full keys and values for every head. Rows live in fixed-size blocks of a KvStorage; a
// sequence reaches its rows through its block table (KvView), so the serving engine can page
// blocks between sequences and share prefix blocks, while a single sequence can simply own
// one block as large as its context (KvCache).
//
// Rows are stored in the cache's dtype (--kv-cache-dtype, as vLLM):
//  - float32:  the values as computed; 4 bytes each (2304 bytes per token and layer for Kimi).
//  - bfloat16: rounded to nearest even; 2 bytes each (1152 bytes; vLLM's default, "auto").
//  - fp8_e4m3: 1 byte each plus two float32 scales at the end of the row, one for the latent
//    and one for the rope key (576 + 8 = 584 bytes, 0.253 of float32). Each scale is the amax
//    of its part / 448 (e4m3's largest value), computed when the row is written, so no value
//    saturates and every row uses e4m3's whole range; the row is stored as value / scale. Why
//    per row and two per row: activations vary by token (a static per-tensor scale, vLLM's
//    default of 1.0, clips outliers or wastes range), and the two parts come from different
//    places: the latent leaves an RMS norm (bounded by its weight), the rope key is a raw
//    projection output with no norm, so one shared scale would push the smaller part into
//    e4m3's subnormals (measured amax ratios: bench/results/2026-12-03-kv-cache-dtype.md).
//    The scales sit inside the row, so a block's bytes are self-contained (block I/O below).
//    A row holding NaN or Inf gets a NaN scale and reads as NaN, as a float32 row would
//    poison the attention scores.
// Attention reads every dtype directly (kernels/mla_kernels.h): nothing is converted per step.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "format/model_config.h"
#include "kernels/mla_kernels.h"

namespace kimi {

enum class KvCacheDtype { Float32, BFloat16, Fp8E4m3 };

// vLLM's spellings: auto (= bfloat16), bfloat16, fp8 (= fp8_e4m3), fp8_e4m3, float32; also the
// short bf16 / f32. Throws kimi::Error naming the accepted values otherwise.
KvCacheDtype parse_kv_cache_dtype(std::string_view name);
std::string_view kv_cache_dtype_name(KvCacheDtype d);  // "float32", "bfloat16", "fp8_e4m3"

// The byte layout of one cached row (one token, one layer).
struct KvRowLayout {
  KvCacheDtype dtype = KvCacheDtype::Float32;
  int64_t lora = 0;   // latent values, first
  int64_t rope = 0;   // rope key values, after the latent
  int64_t bytes = 0;  // whole row, scales included
  int64_t scale_offset = 0;  // fp8: byte offset of the two float32 scales (latent, rope)

  KvRowLayout() = default;
  KvRowLayout(KvCacheDtype d, int64_t lora_width, int64_t rope_width);
  int64_t width() const { return lora + rope; }
  int64_t scales_per_row() const { return dtype == KvCacheDtype::Fp8E4m3 ? 2 : 0; }
};

// Encodes `width()` floats into a row (bf16: round to nearest even; fp8: scaled as above,
// rounded to nearest even), and back (tests, and the naive attention's latent gather).
void encode_kv_row(const KvRowLayout& layout, const float* src, std::byte* dst);
void decode_kv_row(const KvRowLayout& layout, const std::byte* src, float* dst);

// One sequence's cache as attention sees it.
struct KvView {
  std::byte* storage = nullptr;  // [layers][num_blocks][block_size][layout.bytes]
  int64_t layer_stride = 0;      // bytes per layer
  int64_t block_size = 0;
  KvRowLayout layout;
  std::span<const int32_t> block_table;  // the sequence's blocks, in position order
  int64_t length = 0;                    // tokens already cached; a step appends after them

  int64_t capacity() const { return int64_t(block_table.size()) * block_size; }
  std::byte* row(int64_t layer, int64_t pos) const {
    const int64_t block = block_table[size_t(pos / block_size)];
    return storage + layer * layer_stride + (block * block_size + pos % block_size) * layout.bytes;
  }
  // Rows [begin, end) of `layer`, cut at the end of begin's block: the contiguous run the
  // attention kernels read in one call.
  MlaRows rows_in_block(int64_t layer, int64_t begin, int64_t end) const;
};

// What a KV transfer sends along with one block's bytes: enough to check that the receiving
// storage has the same shape and to interpret the bytes. The bytes are layer-major,
// [layers][block_size][row_bytes], each row laid out as KvRowLayout says (fp8: the row's two
// float32 scales, latent then rope, in its last 8 bytes).
struct KvBlockDesc {
  KvCacheDtype dtype = KvCacheDtype::Float32;
  int64_t layers = 0, block_size = 0;
  int64_t row_width = 0;       // values per row (lora + rope)
  int64_t lora = 0;            // of which latent
  int64_t row_bytes = 0;       // bytes per row, scales included
  int64_t scales_per_row = 0;  // float32 scales at the end of each row (fp8: 2)
  int64_t bytes = 0;           // layers * block_size * row_bytes
  bool operator==(const KvBlockDesc&) const = default;
};

// Memory for num_blocks blocks of block_size tokens, all layers.
class KvStorage {
 public:
  KvStorage(const ModelConfig& c, int64_t num_blocks, int64_t block_size,
            KvCacheDtype dtype = KvCacheDtype::Float32);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t row_width() const { return layout_.width(); }
  KvCacheDtype dtype() const { return layout_.dtype; }
  const KvRowLayout& row_layout() const { return layout_; }
  size_t bytes() const { return size_; }
  static size_t bytes_per_block(const ModelConfig& c, int64_t block_size,
                                KvCacheDtype dtype = KvCacheDtype::Float32);
  static size_t bytes_per_token(const ModelConfig& c, KvCacheDtype dtype);
  KvView view(std::span<const int32_t> block_table, int64_t length) {
    return {data_.get(), layer_stride(), block_size_, layout_, block_table, length};
  }

  // Block I/O: one block's rows of every layer as one contiguous buffer (block_desc().bytes).
  // write_block throws kimi::Error when desc differs from this storage's or a size is wrong.
  KvBlockDesc block_desc() const;
  void read_block(int32_t block, std::span<std::byte> out) const;
  std::vector<std::byte> read_block(int32_t block) const;
  void write_block(int32_t block, const KvBlockDesc& desc, std::span<const std::byte> in);

 private:
  int64_t layer_stride() const { return num_blocks_ * block_size_ * layout_.bytes; }
  void check_block(int32_t block) const;

  int64_t num_layers_, num_blocks_, block_size_;
  KvRowLayout layout_;
  size_t size_;
  // Left uninitialised: every row is written before it is read, and untouched pages of a large
  // cache then cost no memory.
  std::unique_ptr<std::byte[]> data_;
};

// A single sequence's cache with room for capacity_tokens (one block), for offline use:
// `kimi generate`, `kimi bench latency`, tests.
class KvCache {
 public:
  KvCache(const ModelConfig& c, int64_t capacity_tokens, KvCacheDtype dtype = KvCacheDtype::Float32);

  int64_t capacity() const { return storage_.block_size(); }
  int64_t length() const { return length_; }
  KvCacheDtype dtype() const { return storage_.dtype(); }
  void set_length(int64_t n);  // grow after a forward step, or shrink to drop a suffix
  KvView view() { return storage_.view(table_, length_); }
  size_t bytes() const { return storage_.bytes(); }

 private:
  KvStorage storage_;
  std::vector<int32_t> table_ = {0};
  int64_t length_ = 0;
};

}  // namespace kimi
