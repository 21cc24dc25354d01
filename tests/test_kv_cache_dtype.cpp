// The KV cache's narrow dtypes: the fp8 e4m3 conversions at their edges, the bf16 / fp8 dot and
// axpy kernels of every instruction set this CPU has against a double reference of the decoded
// values (and against the scalar variant), the row encodings' error bounds, the bytes per token,
// and block I/O (read -> write elsewhere -> read is exact, mismatches are refused).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rng.h"
#include "kernels/cpu_features.h"
#include "kernels/vec_ops.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "isa_test.h"
#include "test_util.h"

namespace kimi {
namespace {

// ---------------------------------------------------------------------------------------------
// fp8 e4m3 conversions

TEST(Fp8E4m3, DecodesTheFormat) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);            // exponent 7 = bias
  EXPECT_EQ(fp8_e4m3_to_f32(0x39), 1.125f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);          // largest finite
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0x1p-6f);         // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);         // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * 0x1p-9f);     // largest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);          // exponent 15 is finite (no infinities)
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
}

TEST(Fp8E4m3, EveryFiniteCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(b))), b) << "code " << b;
  }
}

TEST(Fp8E4m3, EdgeCases) {
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  // Saturation: everything past 448, infinities included (no Inf in e4m3fn).
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(449.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(480.0f), 0x7e);  // would be the NaN code's value
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  // NaN stays NaN, with its sign.
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  // Round half to even between normals: 1.0625 is halfway 1 (0x38) .. 1.125 (0x39).
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // halfway 1.125 .. 1.25: to the even 1.25
  EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  // Rounding up carries into the next binade: 1.96875 is halfway 1.875 .. 2.
  EXPECT_EQ(f32_to_fp8_e4m3(1.96875f), 0x40);
  // Subnormals: units of 2^-9, half to even; below half the smallest, zero.
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-9f), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-10f), 0x00);       // halfway 0 .. 2^-9: even is 0
  EXPECT_EQ(f32_to_fp8_e4m3(3 * 0x1p-10f), 0x02);   // halfway 1 .. 2 units: even is 2
  EXPECT_EQ(f32_to_fp8_e4m3(-5 * 0x1p-9f), 0x85);
  EXPECT_EQ(f32_to_fp8_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(15 * 0x1p-10f), 0x08);  // 7.5 units: rounds up to the smallest normal
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(Fp8E4m3, RoundsToTheNearestCode) {
  // Against a brute-force search over every finite code.
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    const float x = float(rng.normal() * std::exp2(rng.uniform() * 24 - 14));
    const float got = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x));
    double best = 1e300;
    for (int b = 0; b < 256; ++b)
      if ((b & 0x7f) != 0x7f) best = std::min(best, std::fabs(double(fp8_e4m3_to_f32(uint8_t(b))) - x));
    ASSERT_EQ(std::fabs(double(got) - x), best) << "x = " << x;
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels

class KvKernelsIsa : public test::IsaTest {};

using test::random_floats;
std::vector<uint16_t> random_bf16(size_t n, Rng& rng) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(float(rng.normal() * 3));
  return v;
}
// Every finite e4m3 code is equally likely (subnormals, both signs, 448), never 0x7f / 0xff.
std::vector<uint8_t> random_e4m3(size_t n, Rng& rng) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) {
    do x = uint8_t(rng.next_u64()); while ((x & 0x7f) == 0x7f);
  }
  return v;
}

// Summation order differs between variants: f32 rounding of a length-n sum of terms of total
// magnitude `mag` is below n * 2^-24 * mag; 1e-6 * (mag + 1) * sqrt-ish slack covers 4099 terms.
void expect_sum_close(double got, double want, double mag, const std::string& what) {
  EXPECT_NEAR(got, want, 2e-6 * mag + 1e-30) << what;
}

std::vector<int64_t> lengths() {
  std::vector<int64_t> out;
  for (int64_t n = 0; n <= 300; n += 1 + n / 16) out.push_back(n);
  for (int64_t n : {512, 576, 4099}) out.push_back(n);
  return out;
}

TEST_P(KvKernelsIsa, DotAndAxpyBf16) {
  Rng rng(41);
  for (int64_t n : lengths()) {
    const std::vector<float> a = random_floats(size_t(n), rng), y0 = random_floats(size_t(n), rng);
    const std::vector<uint16_t> b = random_bf16(size_t(n), rng);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double t = double(a[size_t(i)]) * bf16_to_f32(b[size_t(i)]);
      want += t;
      mag += std::fabs(t);
    }
    const std::string at = " n=" + std::to_string(n);
    expect_sum_close(dot_bf16(a.data(), b.data(), n, isa()), want, mag, "dot_bf16" + at);
    expect_sum_close(dot_bf16(a.data(), b.data(), n, isa()), dot_bf16(a.data(), b.data(), n, Isa::Scalar), mag,
                 "dot_bf16 vs scalar" + at);
    std::vector<float> y = y0;
    y.push_back(99.0f);  // guard
    const float s = float(rng.normal());
    axpy_bf16(y.data(), s, b.data(), n, isa());
    std::vector<float> ys = y0;
    axpy_bf16(ys.data(), s, b.data(), n, Isa::Scalar);
    for (int64_t i = 0; i < n; ++i) {
      const double w = double(y0[size_t(i)]) + double(s) * bf16_to_f32(b[size_t(i)]);
      const double m = std::fabs(double(y0[size_t(i)])) + std::fabs(double(s) * bf16_to_f32(b[size_t(i)]));
      expect_sum_close(y[size_t(i)], w, m, "axpy_bf16" + at);
      expect_sum_close(y[size_t(i)], ys[size_t(i)], m, "axpy_bf16 vs scalar" + at);
    }
    ASSERT_EQ(y.back(), 99.0f) << "axpy_bf16 wrote past the end";
  }
}

TEST_P(KvKernelsIsa, DotAndAxpyE4m3) {
  Rng rng(43);
  for (int64_t n : lengths()) {
    const std::vector<float> a = random_floats(size_t(n), rng), y0 = random_floats(size_t(n), rng);
    const std::vector<uint8_t> b = random_e4m3(size_t(n), rng);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double t = double(a[size_t(i)]) * fp8_e4m3_to_f32(b[size_t(i)]);
      want += t;
      mag += std::fabs(t);
    }
    const std::string at = " n=" + std::to_string(n);
    expect_sum_close(dot_e4m3(a.data(), b.data(), n, isa()), want, mag, "dot_e4m3" + at);
    expect_sum_close(dot_e4m3(a.data(), b.data(), n, isa()), dot_e4m3(a.data(), b.data(), n, Isa::Scalar), mag,
                 "dot_e4m3 vs scalar" + at);
    std::vector<float> y = y0;
    y.push_back(99.0f);
    const float s = float(rng.normal()) / 64;
    axpy_e4m3(y.data(), s, b.data(), n, isa());
    std::vector<float> ys = y0;
    axpy_e4m3(ys.data(), s, b.data(), n, Isa::Scalar);
    for (int64_t i = 0; i < n; ++i) {
      const double v = fp8_e4m3_to_f32(b[size_t(i)]);
      expect_sum_close(y[size_t(i)], double(y0[size_t(i)]) + double(s) * v,
                   std::fabs(double(y0[size_t(i)])) + std::fabs(double(s) * v), "axpy_e4m3" + at);
      expect_sum_close(y[size_t(i)], ys[size_t(i)], std::fabs(double(y0[size_t(i)])) + std::fabs(double(s) * v),
                   "axpy_e4m3 vs scalar" + at);
    }
    ASSERT_EQ(y.back(), 99.0f) << "axpy_e4m3 wrote past the end";

    std::vector<float> d(size_t(n) + 1, 99.0f);
    e4m3_to_f32(b.data(), 0.25f, d.data(), n, isa());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(d[size_t(i)], 0.25f * fp8_e4m3_to_f32(b[size_t(i)])) << "e4m3_to_f32" << at << " i=" << i;
    ASSERT_EQ(d.back(), 99.0f) << "e4m3_to_f32 wrote past the end";
  }
}

TEST_P(KvKernelsIsa, E4m3DecodesEveryFiniteCodeExactly) {
  // All 254 finite codes, subnormals included, through the f16 route of each variant.
  std::vector<uint8_t> codes;
  for (int b = 0; b < 256; ++b)
    if ((b & 0x7f) != 0x7f) codes.push_back(uint8_t(b));
  std::vector<float> out(codes.size());
  e4m3_to_f32(codes.data(), 1.0f, out.data(), int64_t(codes.size()), isa());
  // (-0 may come back as +0: the scaling is a multiply-add onto +0.)
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(out[i], fp8_e4m3_to_f32(codes[i])) << "code " << int(codes[i]);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KvKernelsIsa, test::all_isas(), test::isa_param_name);

// ---------------------------------------------------------------------------------------------
// Rows and storage

ModelConfig kimi_like_config(int64_t layers, int64_t lora, int64_t rope) {
  ModelConfig c;
  c.num_hidden_layers = layers;
  c.kv_lora_rank = lora;
  c.qk_rope_head_dim = rope;
  return c;
}

TEST(KvCacheDtype, ParsesVllmNames) {
  EXPECT_EQ(parse_kv_cache_dtype("auto"), KvCacheDtype::BFloat16);
  EXPECT_EQ(parse_kv_cache_dtype("bfloat16"), KvCacheDtype::BFloat16);
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), KvCacheDtype::Fp8E4m3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3"), KvCacheDtype::Fp8E4m3);
  EXPECT_EQ(parse_kv_cache_dtype("float32"), KvCacheDtype::Float32);
  EXPECT_THROW(parse_kv_cache_dtype("fp8_e5m2"), Error);
  EXPECT_THROW(parse_kv_cache_dtype(""), Error);
  for (KvCacheDtype d : {KvCacheDtype::Float32, KvCacheDtype::BFloat16, KvCacheDtype::Fp8E4m3})
    EXPECT_EQ(parse_kv_cache_dtype(kv_cache_dtype_name(d)), d);
}

TEST(KvCacheDtype, BytesPerTokenOfKimi) {
  // Kimi-K2.5: 61 layers, 512 latent + 64 rope values per row.
  const ModelConfig c = kimi_like_config(61, 512, 64);
  EXPECT_EQ(KvStorage::bytes_per_token(c, KvCacheDtype::Float32), 61u * 2304);
  EXPECT_EQ(KvStorage::bytes_per_token(c, KvCacheDtype::BFloat16), 61u * 1152);
  EXPECT_EQ(KvStorage::bytes_per_token(c, KvCacheDtype::Fp8E4m3), 61u * 584);  // 576 + two f32 scales
  EXPECT_EQ(KvStorage::bytes_per_block(c, 16, KvCacheDtype::BFloat16), 16u * 61 * 1152);
  EXPECT_EQ(KvStorage(c, 2, 16, KvCacheDtype::Fp8E4m3).bytes(), 2u * 16 * 61 * 584);
}

std::vector<float> random_row(int64_t lora, int64_t rope, Rng& rng, double rope_scale) {
  std::vector<float> r(size_t(lora + rope));
  for (int64_t i = 0; i < lora + rope; ++i) r[size_t(i)] = float(rng.normal() * (i < lora ? 1.0 : rope_scale));
  return r;
}

TEST(KvCacheDtype, RowEncodingErrorBounds) {
  Rng rng(7);
  const int64_t lora = 40, rope = 12;  // ragged widths: padding before the fp8 scales
  for (KvCacheDtype d : {KvCacheDtype::Float32, KvCacheDtype::BFloat16, KvCacheDtype::Fp8E4m3}) {
    const KvRowLayout l(d, lora, rope);
    std::vector<std::byte> row(size_t(l.bytes));
    for (int trial = 0; trial < 50; ++trial) {
      // The rope part 30x larger: each part keeps its own relative precision.
      const std::vector<float> x = random_row(lora, rope, rng, 30.0);
      encode_kv_row(l, x.data(), row.data());
      std::vector<float> y(x.size());
      decode_kv_row(l, row.data(), y.data());
      for (int64_t part = 0; part < 2; ++part) {
        const int64_t b = part == 0 ? 0 : lora, e = part == 0 ? lora : lora + rope;
        float amax = 0;
        for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
        for (int64_t i = b; i < e; ++i) {
          const float xi = x[size_t(i)], err = std::fabs(y[size_t(i)] - xi);
          if (d == KvCacheDtype::Float32) {
            ASSERT_EQ(y[size_t(i)], xi);
          } else if (d == KvCacheDtype::BFloat16) {
            ASSERT_LE(err, std::fabs(xi) * 0x1p-8f) << i;  // half an ulp of 8 significant bits
          } else {
            // Half an ulp of 3 mantissa bits, or half the subnormal step (2^-10 of the scale).
            ASSERT_LE(err, std::max(std::fabs(xi) * 0x1p-4f, amax / 448 * 0x1p-10f) * 1.0001f) << i;
          }
        }
      }
    }
  }
}

TEST(KvCacheDtype, Fp8RowSpecialValues) {
  const KvRowLayout l(KvCacheDtype::Fp8E4m3, 16, 8);
  std::vector<std::byte> row(size_t(l.bytes));
  std::vector<float> x(24, 0.0f), y(24);
  // All zeros: zeros back.
  encode_kv_row(l, x.data(), row.data());
  decode_kv_row(l, row.data(), y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
  // The amax of each part comes back exactly (it is 448 x scale).
  x[3] = -7.25f;
  x[20] = 1234.5f;
  encode_kv_row(l, x.data(), row.data());
  decode_kv_row(l, row.data(), y.data());
  EXPECT_FLOAT_EQ(y[3], -7.25f);
  EXPECT_FLOAT_EQ(y[20], 1234.5f);
  // A NaN or Inf poisons only its own part, and reads as NaN there (as float32 would make the
  // attention scores NaN), never as a finite number.
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[18] = std::numeric_limits<float>::infinity();
  encode_kv_row(l, x.data(), row.data());
  decode_kv_row(l, row.data(), y.data());
  for (int i = 0; i < 24; ++i) EXPECT_TRUE(std::isnan(y[size_t(i)])) << i;
  x[18] = 0.0f;
  encode_kv_row(l, x.data(), row.data());
  decode_kv_row(l, row.data(), y.data());
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(y[size_t(i)])) << i;
  for (int i = 16; i < 24; ++i) EXPECT_FALSE(std::isnan(y[size_t(i)])) << i;
  // No stored byte is a NaN code (the kernels do not read those).
  for (int64_t i = 0; i < l.width(); ++i) EXPECT_NE(uint8_t(row[size_t(i)]) & 0x7f, 0x7f);
}

// Fills every row of every block and layer through views, as attention writes them.
void fill(KvStorage& s, Rng& rng) {
  const int64_t lora = s.row_layout().lora, rope = s.row_layout().rope;
  std::vector<int32_t> table(size_t(s.num_blocks()));
  for (int64_t b = 0; b < s.num_blocks(); ++b) table[size_t(b)] = int32_t(b);
  const KvView v = s.view(table, 0);
  for (int64_t layer = 0; layer < s.block_desc().layers; ++layer)
    for (int64_t pos = 0; pos < v.capacity(); ++pos) {
      const std::vector<float> x = random_row(lora, rope, rng, 10.0);
      encode_kv_row(v.layout, x.data(), v.row(layer, pos));
    }
}

TEST(KvCacheDtype, BlockRoundTripIsExact) {
  const ModelConfig c = kimi_like_config(3, 40, 12);
  Rng rng(11);
  for (KvCacheDtype d : {KvCacheDtype::Float32, KvCacheDtype::BFloat16, KvCacheDtype::Fp8E4m3}) {
    KvStorage s(c, 5, 4, d);
    fill(s, rng);
    const KvBlockDesc desc = s.block_desc();
    EXPECT_EQ(desc.dtype, d);
    EXPECT_EQ(desc.layers, 3);
    EXPECT_EQ(desc.block_size, 4);
    EXPECT_EQ(desc.row_width, 52);
    EXPECT_EQ(desc.lora, 40);
    EXPECT_EQ(desc.row_bytes, s.row_layout().bytes);
    EXPECT_EQ(desc.scales_per_row, d == KvCacheDtype::Fp8E4m3 ? 2 : 0);
    EXPECT_EQ(desc.bytes, 3 * 4 * desc.row_bytes);

    const std::vector<std::byte> sent = s.read_block(1);
    ASSERT_EQ(int64_t(sent.size()), desc.bytes);
    // Into another storage (the receiving side of a transfer) and into another block here.
    KvStorage other(c, 3, 4, d);
    other.write_block(2, desc, sent);
    s.write_block(3, desc, sent);
    EXPECT_EQ(other.read_block(2), sent);
    EXPECT_EQ(s.read_block(3), sent);
    // Row by row through views: block 3 now decodes to block 1's values; its neighbours
    // (blocks 2 and 4) are untouched.
    const std::vector<int32_t> t1 = {1}, t3 = {3}, t2 = {2}, t4 = {4};
    const KvView v1 = s.view(t1, 0), v3 = s.view(t3, 0);
    for (int64_t layer = 0; layer < 3; ++layer)
      for (int64_t pos = 0; pos < 4; ++pos)
        EXPECT_EQ(std::memcmp(v1.row(layer, pos), v3.row(layer, pos), size_t(desc.row_bytes)), 0);
    EXPECT_NE(s.read_block(2), sent);
    EXPECT_NE(s.read_block(4), sent);
  }
}

TEST(KvCacheDtype, BlockWriteRefusesMismatches) {
  const ModelConfig c = kimi_like_config(2, 16, 8);
  KvStorage bf(c, 2, 4, KvCacheDtype::BFloat16), fp8(c, 2, 4, KvCacheDtype::Fp8E4m3), wide(c, 2, 8, KvCacheDtype::BFloat16);
  Rng rng(3);
  fill(bf, rng);
  const std::vector<std::byte> bytes = bf.read_block(0);
  EXPECT_THROW(fp8.write_block(0, bf.block_desc(), bytes), Error);  // dtype differs
  EXPECT_THROW(wide.write_block(0, bf.block_desc(), bytes), Error);  // block size differs
  EXPECT_THROW(bf.write_block(2, bf.block_desc(), bytes), Error);  // no such block
  EXPECT_THROW(bf.write_block(0, bf.block_desc(), std::span(bytes).first(bytes.size() - 1)), Error);
  std::vector<std::byte> small(bytes.size() - 1);
  EXPECT_THROW(bf.read_block(0, small), Error);
  EXPECT_THROW((void)bf.read_block(-1), Error);
}

// Why fp8 rows carry two scales: on a real forward pass (the tiny test model, float32 cache),
// the rope key's magnitude differs from the latent's (the latent leaves an RMS norm, the rope
// key does not), and a scale shared by both parts costs the smaller part precision. Measured
// here: the ratio of the parts' amax, and the RMS relative error of each part stored with its
// own scale (the layout) against one shared scale (amax of the whole row / 448).
TEST(KvCacheDtype, SeparateRopeScaleKeepsBothPartsPrecise) {
  test::TempDir dir;
  Model model(test::make_tiny_model(dir), ModelOptions{.num_threads = 1});
  const ModelConfig& c = model.config();
  std::vector<int32_t> prompt(48);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % size_t(c.vocab_size - 256));
  KvCache cache(c, int64_t(prompt.size()), KvCacheDtype::Float32);
  (void)forward_sequence(model, prompt, cache);
  const KvView v = cache.view();
  const int64_t lora = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  double ratio_min = 1e30, ratio_max = 0;
  double err_own[2] = {0, 0}, err_shared[2] = {0, 0}, norm[2] = {0, 0};
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer)
    for (int64_t pos = 0; pos < int64_t(prompt.size()); ++pos) {
      const auto* x = reinterpret_cast<const float*>(v.row(layer, pos));
      float amax[2] = {0, 0};
      for (int64_t i = 0; i < lora + rope; ++i) amax[i >= lora] = std::max(amax[i >= lora], std::fabs(x[i]));
      ratio_min = std::min(ratio_min, double(amax[1] / amax[0]));
      ratio_max = std::max(ratio_max, double(amax[1] / amax[0]));
      const float shared = std::max(amax[0], amax[1]) / 448;
      for (int64_t i = 0; i < lora + rope; ++i) {
        const int part = i >= lora;
        const float own = amax[part] / 448;
        const double e1 = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[i] / own)) * own - x[i];
        const double e2 = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[i] / shared)) * shared - x[i];
        err_own[part] += e1 * e1;
        err_shared[part] += e2 * e2;
        norm[part] += double(x[i]) * x[i];
      }
    }
  const char* names[2] = {"latent", "rope"};
  std::printf("[ fp8 scales ] amax(rope) / amax(latent) per row: %.3g .. %.3g\n", ratio_min, ratio_max);
  for (int part = 0; part < 2; ++part)
    std::printf("[ fp8 scales ] %s RMS relative error: own scale %.4f, shared scale %.4f\n", names[part],
                std::sqrt(err_own[part] / norm[part]), std::sqrt(err_shared[part] / norm[part]));
  // With its own scale each part is within e4m3's relative precision (half an ulp of 3 bits is
  // 2^-4; uniform rounding gives ~2^-4 / sqrt(3) RMS), and never worse than with a shared one.
  for (int part = 0; part < 2; ++part) {
    EXPECT_LT(std::sqrt(err_own[part] / norm[part]), 0.045) << names[part];
    EXPECT_LE(err_own[part], err_shared[part] * 1.05) << names[part];
  }
}

}  // namespace
}  // namespace kimi
