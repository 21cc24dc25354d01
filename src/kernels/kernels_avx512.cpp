// AVX-512 (F/BW/VL/DQ) + FMA + F16C kernels (16 f32 lanes): the generic float kernels
// instantiated with avx512_traits.h. Compiled with the AVX-512 flags; only reached through the
// dispatch when the CPU has them.
#include "kernels/avx512_traits.h"
#include "kernels/kernels_generic.h"

namespace kimi::kernels {

const KernelTable kAvx512Kernels = make_table<Avx512Traits>(Isa::Avx512);

}  // namespace kimi::kernels
