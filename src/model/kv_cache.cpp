#include "model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/dtype.h"
#include "common/error.h"
#include "kernels/matmul.h"
#include "kernels/vec_ops.h"

namespace kimi {

KvCacheDtype parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto" || name == "bfloat16" || name == "bf16") return KvCacheDtype::BFloat16;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::Fp8E4m3;
  if (name == "float32" || name == "f32" || name == "float") return KvCacheDtype::Float32;
  throw Error("unknown KV cache dtype '" + std::string(name) +
              "' (expected auto, bfloat16, fp8, fp8_e4m3 or float32)");
}

std::string_view kv_cache_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::BFloat16: return "bfloat16";
    case KvCacheDtype::Fp8E4m3: return "fp8_e4m3";
    case KvCacheDtype::Float32: break;
  }
  return "float32";
}

KvRowLayout::KvRowLayout(KvCacheDtype d, int64_t lora_width, int64_t rope_width)
    : dtype(d), lora(lora_width), rope(rope_width) {
  const int64_t w = lora + rope;
  switch (d) {
    case KvCacheDtype::Float32: bytes = w * 4; break;
    case KvCacheDtype::BFloat16: bytes = (w * 2 + 3) / 4 * 4; break;  // rows 4-byte aligned
    case KvCacheDtype::Fp8E4m3:
      scale_offset = (w + 3) / 4 * 4;  // the float scales 4-byte aligned
      bytes = scale_offset + 2 * int64_t(sizeof(float));
      break;
  }
}

namespace {

// amax / 448 of a row part, NaN if the part holds NaN or Inf (see the header), and 1 for an
// all-zero part (any scale would do; 1 keeps 0 / scale finite).
float fp8_scale(const float* x, int64_t n) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite) return std::nanf("");
  return amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
}

void encode_fp8_part(const float* x, int64_t n, float scale, uint8_t* out) {
  // A NaN scale's row is unreadable anyway; 0 bytes keep the stored bytes away from 0x7f.
  const float inv = std::isnan(scale) ? 0.0f : 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp8_e4m3(std::isnan(scale) ? 0.0f : x[i] * inv);
}

void read_scales(const KvRowLayout& l, const std::byte* row, float* scales) {
  std::memcpy(scales, row + l.scale_offset, 2 * sizeof(float));
}

}  // namespace

void encode_kv_row(const KvRowLayout& l, const float* src, std::byte* dst) {
  switch (l.dtype) {
    case KvCacheDtype::Float32: std::memcpy(dst, src, size_t(l.width()) * sizeof(float)); return;
    case KvCacheDtype::BFloat16: {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < l.width(); ++i) out[i] = f32_to_bf16(src[i]);
      std::memset(dst + l.width() * 2, 0, size_t(l.bytes - l.width() * 2));
      return;
    }
    case KvCacheDtype::Fp8E4m3: {
      auto* out = reinterpret_cast<uint8_t*>(dst);
      const float scales[2] = {fp8_scale(src, l.lora), fp8_scale(src + l.lora, l.rope)};
      encode_fp8_part(src, l.lora, scales[0], out);
      encode_fp8_part(src + l.lora, l.rope, scales[1], out + l.lora);
      // Padding bytes written too, so that a block's bytes are fully defined.
      std::memset(out + l.width(), 0, size_t(l.scale_offset - l.width()));
      std::memcpy(dst + l.scale_offset, scales, sizeof scales);
      return;
    }
  }
}

void decode_kv_row(const KvRowLayout& l, const std::byte* src, float* dst) {
  switch (l.dtype) {
    case KvCacheDtype::Float32: std::memcpy(dst, src, size_t(l.width()) * sizeof(float)); return;
    case KvCacheDtype::BFloat16: {
      convert_to_f32(DType::BF16, src, dst, l.width());
      return;
    }
    case KvCacheDtype::Fp8E4m3: {
      float scales[2];
      read_scales(l, src, scales);
      const auto* in = reinterpret_cast<const uint8_t*>(src);
      e4m3_to_f32(in, scales[0], dst, l.lora);
      e4m3_to_f32(in + l.lora, scales[1], dst + l.lora, l.rope);
      return;
    }
  }
}

MlaRows KvView::rows_in_block(int64_t layer, int64_t begin, int64_t end) const {
  MlaRows m;
  switch (layout.dtype) {
    case KvCacheDtype::Float32: m.elem = KvRowElem::F32; break;
    case KvCacheDtype::BFloat16: m.elem = KvRowElem::BF16; break;
    case KvCacheDtype::Fp8E4m3: m.elem = KvRowElem::E4m3; break;
  }
  m.base = row(layer, begin);
  m.stride = layout.bytes;
  m.count = std::min(end, (begin / block_size + 1) * block_size) - begin;
  m.lora = layout.lora;
  m.rope = layout.rope;
  m.scale_offset = layout.scale_offset;
  return m;
}

KvStorage::KvStorage(const ModelConfig& c, int64_t num_blocks, int64_t block_size, KvCacheDtype dtype)
    : num_layers_(c.num_hidden_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      layout_(dtype, c.kv_lora_rank, c.qk_rope_head_dim) {
  if (num_blocks <= 0 || block_size <= 0) throw Error("KV cache needs a positive number of blocks and block size");
  size_ = size_t(num_layers_ * layer_stride());
  data_ = std::make_unique_for_overwrite<std::byte[]>(size_);
}

size_t KvStorage::bytes_per_token(const ModelConfig& c, KvCacheDtype dtype) {
  return size_t(c.num_hidden_layers * KvRowLayout(dtype, c.kv_lora_rank, c.qk_rope_head_dim).bytes);
}

size_t KvStorage::bytes_per_block(const ModelConfig& c, int64_t block_size, KvCacheDtype dtype) {
  return size_t(block_size) * bytes_per_token(c, dtype);
}

KvBlockDesc KvStorage::block_desc() const {
  KvBlockDesc d;
  d.dtype = layout_.dtype;
  d.layers = num_layers_;
  d.block_size = block_size_;
  d.row_width = layout_.width();
  d.lora = layout_.lora;
  d.row_bytes = layout_.bytes;
  d.scales_per_row = layout_.scales_per_row();
  d.bytes = num_layers_ * block_size_ * layout_.bytes;
  return d;
}

void KvStorage::check_block(int32_t block) const {
  if (block < 0 || block >= num_blocks_)
    throw Error("KV block " + std::to_string(block) + " outside 0.." + std::to_string(num_blocks_ - 1));
}

void KvStorage::read_block(int32_t block, std::span<std::byte> out) const {
  check_block(block);
  const size_t per_layer = size_t(block_size_ * layout_.bytes);
  if (out.size() != per_layer * size_t(num_layers_))
    throw Error("KV block read: buffer of " + std::to_string(out.size()) + " bytes, the block has " +
                std::to_string(per_layer * size_t(num_layers_)));
  for (int64_t l = 0; l < num_layers_; ++l)
    std::memcpy(out.data() + size_t(l) * per_layer, data_.get() + l * layer_stride() + block * int64_t(per_layer),
                per_layer);
}

std::vector<std::byte> KvStorage::read_block(int32_t block) const {
  std::vector<std::byte> out(size_t(block_desc().bytes));
  read_block(block, out);
  return out;
}

void KvStorage::write_block(int32_t block, const KvBlockDesc& desc, std::span<const std::byte> in) {
  check_block(block);
  const KvBlockDesc mine = block_desc();
  if (!(desc == mine))
    throw Error("KV block write: the block is " + std::string(kv_cache_dtype_name(desc.dtype)) + ", " +
                std::to_string(desc.layers) + " layers x " + std::to_string(desc.block_size) + " rows x " +
                std::to_string(desc.row_bytes) + " bytes; this cache holds " +
                std::string(kv_cache_dtype_name(mine.dtype)) + ", " + std::to_string(mine.layers) + " x " +
                std::to_string(mine.block_size) + " x " + std::to_string(mine.row_bytes));
  if (int64_t(in.size()) != mine.bytes)
    throw Error("KV block write: " + std::to_string(in.size()) + " bytes for a block of " +
                std::to_string(mine.bytes));
  const size_t per_layer = size_t(block_size_ * layout_.bytes);
  for (int64_t l = 0; l < num_layers_; ++l)
    std::memcpy(data_.get() + l * layer_stride() + block * int64_t(per_layer), in.data() + size_t(l) * per_layer,
                per_layer);
}

KvCache::KvCache(const ModelConfig& c, int64_t capacity_tokens, KvCacheDtype dtype)
    : storage_(c, 1, capacity_tokens, dtype) {}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity())
    throw Error("KV cache length " + std::to_string(n) + " outside 0.." + std::to_string(capacity()));
  length_ = n;
}

}  // namespace kimi
