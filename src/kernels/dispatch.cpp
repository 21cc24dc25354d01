#include <string>

#include "common/error.h"
#include "kernels/kernels_impl.h"

namespace kimi::kernels {

const KernelTable& kernels_for(Isa isa) {
  if (!isa_supported(isa))
    throw Error("kernels: this CPU does not support the " + std::string(isa_name(isa)) +
                " instruction set");
  switch (isa) {
    case Isa::Avx512: return kAvx512Kernels;
    case Isa::Avx2: return kAvx2Kernels;
    case Isa::Scalar: break;
  }
  return kScalarKernels;
}

const KernelTable& best_kernels() {
  static const KernelTable& table = kernels_for(best_isa());
  return table;
}

}  // namespace kimi::kernels
