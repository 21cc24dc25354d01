#pragma once
// Which SIMD instruction sets this CPU offers; kernels pick their fastest variant from this at
// run time so one binary serves every x86-64 machine.
#include <string_view>

namespace kimi {

enum class Isa { Scalar, Avx2, Avx512 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx_vnni = false;
};

const CpuFeatures& cpu_features();  // detected once, immutable afterwards
Isa best_isa();                      // the widest ISA that the kernels support on this CPU
std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);

}  // namespace kimi
