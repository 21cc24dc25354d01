// AVX2 + FMA + F16C kernels (8 f32 lanes): the generic float kernels instantiated with
// avx2_traits.h. Compiled with -mavx2 -mfma -mf16c; only reached through the dispatch when the
// CPU has them.
#include "kernels/avx2_traits.h"
#include "kernels/kernels_generic.h"

namespace kimi::kernels {

const KernelTable kAvx2Kernels = make_table<Avx2Traits>(Isa::Avx2);

}  // namespace kimi::kernels
