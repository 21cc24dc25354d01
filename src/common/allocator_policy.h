#pragma once
// The process's heap policy for forward steps. Each step allocates its activations and logits
// afresh (tens of MB at the real shapes: 42 MB of logits for 64 rows); glibc serves blocks from
// 128 KiB up (its threshold moves up to 32 MiB) with fresh mmaps and trims freed heap tops, so
// every step faulted its buffers in again, page by page: on the real shapes (16 sequences x 4
// tokens) that was ~10 % of the step, on one thread while the others waited
// (bench/results/2026-12-06-allocator-page-faults.md). With this, freed step buffers stay mapped
// and are reused. Only the `kimi` binary calls it (tests keep the default heap).
namespace kimi {

// Raises glibc's mmap threshold to 1 GiB, keeps up to 1 GiB of freed heap mapped (and a 64 MiB
// pad when the heap grows), and has every thread use the one heap. Call before other threads
// start. A no-op under other allocators (sanitizers).
void keep_step_buffers_mapped();

}  // namespace kimi
