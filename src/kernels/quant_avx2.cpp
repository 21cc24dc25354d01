// AVX2 (+FMA) integer-weight kernels; the int8 dot products are emulated with VPMADDUBSW +
// VPMADDWD. Compiled with the AVX2 flags, reached only through the dispatch.
#include "kernels/quant_avx2_traits.h"

namespace kimi::kernels {

const QuantKernelTable kQuantAvx2{QuantIsa::Avx2, 8, false, &quant_matmul_rows<Avx2QuantTraits<false>>};

}  // namespace kimi::kernels
