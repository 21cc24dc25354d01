#pragma once
// Which SIMD instruction sets this CPU offers; kernels pick their fastest variant from this at
// run time so one binary serves every x86-64 machine. KIMI_MAX_CPU_ISA (scalar, avx2, avx512; as
// oneDNN's ONEDNN_MAX_CPU_ISA or PyTorch's ATEN_CPU_CAPABILITY) caps what is detected, read once
// at the first query: an AVX-512 machine then runs, and can measure, the AVX2 kernels end to end.
#include <optional>
#include <string>
#include <string_view>

namespace kimi {

enum class Isa { Scalar, Avx2, Avx512 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx512_vbmi = false, avx_vnni = false;
  bool intel = false;  // the vendor: some memory-side rules differ (kernels/streaming.h)
};

const CpuFeatures& cpu_features();  // detected once (and capped), immutable afterwards
Isa best_isa();                      // the widest ISA that the kernels support on this CPU
std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);
// Whether the AVX512_BF16 kernels can run (AVX-512 F/BW/VL and BF16, after any cap).
bool has_avx512_bf16();

// The cap's parts, exposed for tests: an ISA name as KIMI_MAX_CPU_ISA takes it (any case), and
// the features left under a cap (AVX2 drops every AVX-512 extension, scalar every SIMD one).
std::optional<Isa> parse_isa(std::string_view name);
CpuFeatures capped_features(CpuFeatures f, Isa cap);
// One line for benchmark headers: the kernels' ISA and extensions in use, and the cap if one is
// set (e.g. "avx2 (+avx-vnni; KIMI_MAX_CPU_ISA=avx2)").
std::string kernel_isa_summary();

}  // namespace kimi
