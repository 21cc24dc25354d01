// AVX-512 (F/BW/VL/DQ) integer-weight kernels; the int8 dot products are emulated with
// VPMADDUBSW + VPMADDWD. Compiled with the AVX-512 flags, reached only through the dispatch.
#include "kernels/quant_avx512_traits.h"

namespace kimi::kernels {

const QuantKernelTable kQuantAvx512{QuantIsa::Avx512, 16, false,
                                    &quant_matmul_rows<Avx512QuantTraits<false>>};

}  // namespace kimi::kernels
