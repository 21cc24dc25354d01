// AVX2 + AVX-VNNI integer-weight kernels: VEX-encoded VPDPBUSD on ymm (CPUs with AVX-VNNI but
// without AVX-512, e.g. Alder Lake). Compiled with those flags, reached only when the CPU has them.
#include "kernels/quant_avx2_traits.h"

namespace kimi::kernels {

const QuantKernelTable kQuantAvx2Vnni{QuantIsa::Avx2Vnni, 8, true,
                                      &quant_matmul_rows<Avx2QuantTraits<true>>};

}  // namespace kimi::kernels
