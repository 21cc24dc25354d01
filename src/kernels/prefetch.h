#pragma once
// The kernels' software prefetches. GCC treats __builtin_prefetch as free of side effects, so a
// helper whose only effect is prefetching is found "pure" (ipa-pure-const) and every call to it
// is deleted: the integer kernels' prefetch_ahead and the float GEMVs' prefetch_rows compiled to
// nothing that way. An asm volatile statement is a side effect the optimiser keeps, so helpers
// built on these survive wherever they are inlined or not.
namespace kimi::kernels {

// Into every cache level (prefetcht0): lines the next few blocks of this tile read.
inline void prefetch_l1(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 3);
#endif
}

// Into L2 and beyond (prefetcht1): a stream's lines a few KiB ahead.
inline void prefetch_l2(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, 2);
#endif
}

}  // namespace kimi::kernels
