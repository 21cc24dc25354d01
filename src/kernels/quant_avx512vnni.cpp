// AVX-512 VNNI integer-weight kernels: VPDPBUSD does 64 u8 x s8 products per instruction.
// Compiled with the AVX-512 + VNNI flags, reached only when the CPU has avx512_vnni.
#include "kernels/quant_avx512_traits.h"

namespace kimi::kernels {

const QuantKernelTable kQuantAvx512Vnni{QuantIsa::Avx512Vnni, 16, true,
                                        &quant_matmul_rows<Avx512QuantTraits<true>>};

}  // namespace kimi::kernels
