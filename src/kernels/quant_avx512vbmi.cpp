// AVX-512 VNNI + VBMI integer-weight kernels: the VNNI variant, with VPMULTISHIFTQB taking the
// nibbles of the 16-bit-activation kernels off the shift port (Avx512QuantTraits::nibble16).
// Compiled with the AVX-512 + VNNI + VBMI flags, reached only when the CPU has all of them.
#include "kernels/quant_avx512_traits.h"

namespace kimi::kernels {

const QuantKernelTable kQuantAvx512VnniVbmi{QuantIsa::Avx512VnniVbmi, 16, true,
                                            &quant_matmul_rows<Avx512QuantTraits<true, true>>};

}  // namespace kimi::kernels
