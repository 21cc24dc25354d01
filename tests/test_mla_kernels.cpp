// The multi-head MLA attention kernels (kernels/mla_kernels.h) for every KV row dtype and every
// instruction set this CPU runs, against a double-precision loop over the rows as
// model/kv_cache.h decodes them: scores and value sums for every head count, with row counts
// and widths that leave ragged ends, rows at a padded stride, and outputs that must be added to.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rng.h"
#include "kernels/cpu_features.h"
#include "kernels/mla_kernels.h"
#include "model/kv_cache.h"

namespace kimi {
namespace {

struct MlaCase {
  Isa isa;
  KvCacheDtype dtype;
};

std::string case_name(const ::testing::TestParamInfo<MlaCase>& p) {
  return std::string(isa_name(p.param.isa)) + "_" + std::string(kv_cache_dtype_name(p.param.dtype));
}

// `count` encoded rows of `layout` at a stride of layout.bytes + pad (the kernel must use the
// stride, not the width), and the same rows decoded to f32.
struct Rows {
  KvRowLayout layout;
  int64_t stride = 0, count = 0;
  std::vector<std::byte> bytes;
  std::vector<float> decoded;  // [count][lora + rope]

  Rows(KvCacheDtype dtype, int64_t lora, int64_t rope, int64_t n, Rng& rng)
      : layout(dtype, lora, rope), stride(layout.bytes + 12), count(n) {
    bytes.assign(size_t(stride * n), std::byte{0x5a});
    decoded.resize(size_t(n * layout.width()));
    std::vector<float> src(size_t(layout.width()));
    for (int64_t j = 0; j < n; ++j) {
      // The rope part larger, as in the model, so that fp8's two scales differ.
      for (int64_t i = 0; i < layout.width(); ++i) src[size_t(i)] = float(rng.normal()) * (i < lora ? 1.0f : 6.0f);
      encode_kv_row(layout, src.data(), &bytes[size_t(j * stride)]);
      decode_kv_row(layout, &bytes[size_t(j * stride)], &decoded[size_t(j * layout.width())]);
    }
  }
  MlaRows view() const {
    MlaRows m;
    m.elem = layout.dtype == KvCacheDtype::Float32    ? KvRowElem::F32
             : layout.dtype == KvCacheDtype::BFloat16 ? KvRowElem::BF16
                                                      : KvRowElem::E4m3;
    m.base = bytes.data();
    m.stride = stride;
    m.count = count;
    m.lora = layout.lora;
    m.rope = layout.rope;
    m.scale_offset = layout.scale_offset;
    return m;
  }
  const float* row(int64_t j) const { return &decoded[size_t(j * layout.width())]; }
};

std::vector<float> normals(size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& f : v) f = float(rng.normal());
  return v;
}

class MlaKernels : public ::testing::TestWithParam<MlaCase> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam().isa)) GTEST_SKIP() << "this CPU lacks " << isa_name(GetParam().isa);
  }
  Isa isa() const { return GetParam().isa; }
  KvCacheDtype dtype() const { return GetParam().dtype; }
};

TEST_P(MlaKernels, ScoresMatchTheDecodedRowsForEveryHeadCount) {
  Rng rng(7);
  for (const auto& [lora, rope] : {std::pair<int64_t, int64_t>{512, 64}, {40, 12}, {7, 3}}) {
    for (int64_t count : {1, 3, 16, 37}) {
      const Rows rows(dtype(), lora, rope, count, rng);
      for (int nh = 1; nh <= kMlaMaxHeads; ++nh) {
        // Queries at strides wider than their parts, as attention passes them.
        const int64_t qls = lora + 5, qrs = rope + 9, ss = count + 4;
        const auto ql = normals(size_t(nh * qls), rng), qr = normals(size_t(nh * qrs), rng);
        std::vector<float> scores(size_t(nh * ss), -7.0f);
        const float scale = 0.125f;
        mla_scores(rows.view(), nh, ql.data(), qls, qr.data(), qrs, scale, scores.data(), ss, isa());
        for (int g = 0; g < nh; ++g) {
          for (int64_t j = 0; j < count; ++j) {
            double want = 0, mag = 0;
            for (int64_t i = 0; i < lora; ++i) {
              want += double(ql[size_t(g * qls + i)]) * rows.row(j)[i];
              mag += std::fabs(double(ql[size_t(g * qls + i)]) * rows.row(j)[i]);
            }
            for (int64_t i = 0; i < rope; ++i) {
              want += double(qr[size_t(g * qrs + i)]) * rows.row(j)[lora + i];
              mag += std::fabs(double(qr[size_t(g * qrs + i)]) * rows.row(j)[lora + i]);
            }
            ASSERT_NEAR(scores[size_t(g * ss + j)], scale * want, scale * (1e-5 * mag + 1e-6))
                << "lora " << lora << " rope " << rope << " rows " << count << " heads " << nh << " head " << g
                << " row " << j;
          }
          for (int64_t j = count; j < ss; ++j) ASSERT_EQ(scores[size_t(g * ss + j)], -7.0f) << "wrote past the rows";
        }
      }
    }
  }
}

TEST_P(MlaKernels, ValuesAddTheWeightedLatentsForEveryHeadCount) {
  Rng rng(11);
  for (const auto& [lora, rope] : {std::pair<int64_t, int64_t>{512, 64}, {40, 12}, {7, 3}}) {
    for (int64_t count : {1, 5, 16, 17, 50}) {
      const Rows rows(dtype(), lora, rope, count, rng);
      for (int nh = 1; nh <= kMlaMaxHeads; ++nh) {
        const int64_t ps = count + 3, os = lora + 6;
        const auto p = normals(size_t(nh * ps), rng);
        const auto start = normals(size_t(nh * os), rng);  // the kernel adds to what is there
        std::vector<float> out = start;
        mla_values(rows.view(), nh, p.data(), ps, out.data(), os, isa());
        for (int g = 0; g < nh; ++g) {
          for (int64_t i = 0; i < lora; ++i) {
            double want = start[size_t(g * os + i)], mag = std::fabs(want);
            for (int64_t j = 0; j < count; ++j) {
              want += double(p[size_t(g * ps + j)]) * rows.row(j)[i];
              mag += std::fabs(double(p[size_t(g * ps + j)]) * rows.row(j)[i]);
            }
            ASSERT_NEAR(out[size_t(g * os + i)], want, 1e-5 * mag + 1e-6)
                << "lora " << lora << " rows " << count << " heads " << nh << " head " << g << " column " << i;
          }
          for (int64_t i = lora; i < os; ++i)
            ASSERT_EQ(out[size_t(g * os + i)], start[size_t(g * os + i)]) << "wrote past the latent";
        }
      }
    }
  }
}

TEST_P(MlaKernels, ANaNRowPoisonsOnlyItsOwnScore) {
  Rng rng(3);
  const int64_t lora = 64, rope = 16, count = 6;
  Rows rows(dtype(), lora, rope, count, rng);
  std::vector<float> bad(size_t(lora + rope), 1.0f);
  bad[5] = std::nanf("");
  encode_kv_row(rows.layout, bad.data(), &rows.bytes[size_t(2 * rows.stride)]);
  const auto ql = normals(size_t(2 * lora), rng), qr = normals(size_t(2 * rope), rng);
  std::vector<float> scores(size_t(2 * count));
  mla_scores(rows.view(), 2, ql.data(), lora, qr.data(), rope, 1.0f, scores.data(), count, isa());
  for (int g = 0; g < 2; ++g)
    for (int64_t j = 0; j < count; ++j) EXPECT_EQ(std::isnan(scores[size_t(g * count + j)]), j == 2) << j;
}

// The AVX512_BF16 scores (kernels::mla_scores_bf16) over a bf16 cache, with queries already in
// bf16: the products of two bf16 values are exact in f32, so against the double loop over the same
// bf16 values the only error is the f32 sums', as for mla_scores.
TEST(MlaScoresBf16, MatchTheDecodedRowsForEveryHeadCount) {
  const kernels::MlaScoresBf16 scores_bf16 = kernels::mla_scores_bf16();
  if (!scores_bf16) GTEST_SKIP() << "this CPU (or its KIMI_MAX_CPU_ISA cap) has no AVX512_BF16";
  Rng rng(19);
  for (const auto& [lora, rope] : {std::pair<int64_t, int64_t>{512, 64}, {40, 12}, {7, 3}}) {
    const int64_t width = lora + rope;
    for (int64_t count : {1, 3, 16, 37}) {
      const Rows rows(KvCacheDtype::BFloat16, lora, rope, count, rng);
      for (int nh = 1; nh <= kMlaMaxHeads; ++nh) {
        const int64_t qs = width + 5, ss = count + 4;  // strides wider than a query and the rows
        const auto qf = normals(size_t(nh * qs), rng);
        std::vector<uint16_t> q(qf.size());
        for (size_t i = 0; i < q.size(); ++i) q[i] = f32_to_bf16(qf[i]);
        std::vector<float> scores(size_t(nh * ss), -7.0f);
        const float scale = 0.125f;
        scores_bf16(rows.view(), nh, q.data(), qs, scale, scores.data(), ss);
        for (int g = 0; g < nh; ++g) {
          for (int64_t j = 0; j < count; ++j) {
            double want = 0, mag = 0;
            for (int64_t i = 0; i < width; ++i) {
              const double p = double(bf16_to_f32(q[size_t(g * qs + i)])) * rows.row(j)[i];
              want += p;
              mag += std::fabs(p);
            }
            ASSERT_NEAR(scores[size_t(g * ss + j)], scale * want, scale * (1e-5 * mag + 1e-6))
                << "lora " << lora << " rope " << rope << " rows " << count << " heads " << nh << " head " << g
                << " row " << j;
          }
          for (int64_t j = count; j < ss; ++j) ASSERT_EQ(scores[size_t(g * ss + j)], -7.0f) << "wrote past the rows";
        }
      }
    }
  }
  // A NaN in a row poisons that row's scores only.
  Rows rows(KvCacheDtype::BFloat16, 64, 16, 6, rng);
  std::vector<float> bad(80, 1.0f);
  bad[5] = std::nanf("");
  encode_kv_row(rows.layout, bad.data(), &rows.bytes[size_t(2 * rows.stride)]);
  const std::vector<uint16_t> q(2 * 80, f32_to_bf16(0.5f));
  std::vector<float> scores(12);
  scores_bf16(rows.view(), 2, q.data(), 80, 1.0f, scores.data(), 6);
  for (int g = 0; g < 2; ++g)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(std::isnan(scores[size_t(g * 6 + j)]), j == 2) << j;
}

// The AVX512_BF16 values (kernels::mla_values_bf16): each probability rounded to bf16 (to nearest
// even), the rows taken in pairs (odd counts leave one alone), products exact and sums f32.
TEST(MlaValuesBf16, AddTheWeightedLatentsForEveryHeadCount) {
  const kernels::MlaValuesBf16 values_bf16 = kernels::mla_values_bf16();
  if (!values_bf16) GTEST_SKIP() << "this CPU (or its KIMI_MAX_CPU_ISA cap) has no AVX512_BF16";
  Rng rng(23);
  for (const auto& [lora, rope] : {std::pair<int64_t, int64_t>{512, 64}, {40, 12}, {7, 3}}) {
    for (int64_t count : {1, 5, 16, 17, 50}) {
      const Rows rows(KvCacheDtype::BFloat16, lora, rope, count, rng);
      for (int nh = 1; nh <= kMlaMaxHeads; ++nh) {
        const int64_t ps = count + 3, os = lora + 6;
        const auto p = normals(size_t(nh * ps), rng);
        const auto start = normals(size_t(nh * os), rng);  // the kernel adds to what is there
        std::vector<float> out = start;
        values_bf16(rows.view(), nh, p.data(), ps, out.data(), os);
        for (int g = 0; g < nh; ++g) {
          for (int64_t i = 0; i < lora; ++i) {
            double want = start[size_t(g * os + i)], mag = std::fabs(want);
            for (int64_t j = 0; j < count; ++j) {
              const double t = double(bf16_to_f32(f32_to_bf16(p[size_t(g * ps + j)]))) * rows.row(j)[i];
              want += t;
              mag += std::fabs(t);
            }
            ASSERT_NEAR(out[size_t(g * os + i)], want, 1e-5 * mag + 1e-6)
                << "lora " << lora << " rows " << count << " heads " << nh << " head " << g << " column " << i;
          }
          for (int64_t i = lora; i < os; ++i)
            ASSERT_EQ(out[size_t(g * os + i)], start[size_t(g * os + i)]) << "wrote past the latent";
        }
      }
    }
  }
}

TEST(MlaKernelsArgs, RejectsHeadCountsOutsideTheRegisterTile) {
  MlaRows m;
  float x = 0;
  EXPECT_THROW(mla_scores(m, 0, &x, 1, &x, 1, 1.0f, &x, 1), Error);
  EXPECT_THROW(mla_values(m, kMlaMaxHeads + 1, &x, 1, &x, 1), Error);
}

INSTANTIATE_TEST_SUITE_P(AllIsasAndDtypes, MlaKernels,
                         ::testing::Values(MlaCase{Isa::Scalar, KvCacheDtype::Float32},
                                           MlaCase{Isa::Scalar, KvCacheDtype::BFloat16},
                                           MlaCase{Isa::Scalar, KvCacheDtype::Fp8E4m3},
                                           MlaCase{Isa::Avx2, KvCacheDtype::Float32},
                                           MlaCase{Isa::Avx2, KvCacheDtype::BFloat16},
                                           MlaCase{Isa::Avx2, KvCacheDtype::Fp8E4m3},
                                           MlaCase{Isa::Avx512, KvCacheDtype::Float32},
                                           MlaCase{Isa::Avx512, KvCacheDtype::BFloat16},
                                           MlaCase{Isa::Avx512, KvCacheDtype::Fp8E4m3}),
                         case_name);

}  // namespace
}  // namespace kimi
