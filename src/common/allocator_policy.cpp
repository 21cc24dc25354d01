#include "common/allocator_policy.h"

#include <malloc.h>

namespace kimi {

void keep_step_buffers_mapped() {
  // Blocks above 1 GiB (a whole tensor converted at load) still get their own mapping, returned
  // to the system when freed. A thread's own arena cannot hold a block over 64 MiB (glibc's heap
  // size): those still map afresh (a server step of over ~100 logit rows).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace kimi
