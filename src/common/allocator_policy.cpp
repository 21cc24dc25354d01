#include "common/allocator_policy.h"

#include <malloc.h>

namespace kimi {

void keep_step_buffers_mapped() {
  // Blocks above 1 GiB (a whole tensor converted at load) still get their own mapping, returned
  // to the system when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  // One arena: a thread's own arena cannot hold a block over 64 MiB (glibc's heap size) and maps
  // such blocks afresh, and `kimi serve` steps on its engine thread (256 rows of logits are
  // 168 MB). Small blocks come from each thread's cache without the arena's lock.
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace kimi
