// The C allocator's settings for a process that checks kernels.
#pragma once

#include <cstdlib>  // first: on glibc it defines __GLIBC__ (features.h)

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kprop {

// A check allocates and frees tensors of 10^4 to 10^6 doubles per case (the
// expression evaluator: one per node; the families: inputs, outputs,
// baselines). glibc's defaults hand such blocks back to the kernel at once
// (mmap above 128 KiB, the heap's top trimmed above 128 KiB), so each case
// faults the same pages in again, zeroed: a declared op spent 40% of its CPU
// time in the kernel (specs/ops/rmsnorm.yaml, 1.6 CPU-s of which 0.65 s
// system time; 0.9 CPU-s and none with these settings). Blocks up to 256 MiB
// now come from the heap, which keeps up to 512 MiB of free top; memory is
// still reused, and the process's peak is what it was. The settings are
// hand-picked, not a library's: glibc's own tunables (GLIBC_TUNABLES) are
// the same knobs, set here so that no user has to. Other C libraries, and
// the sanitizers' allocators, are left as they are. Call first thing in main.
// glibc before 2.35 refuses a threshold above 32 MiB (HEAP_MAX_SIZE / 2 on
// 64 bits) and keeps 128 KiB; M_TRIM_THRESHOLD would then freeze that
// (setting it ends the dynamic threshold), so 32 MiB is asked for there.
inline void tune_allocator() {
#if defined(__GLIBC__)
  if (mallopt(M_MMAP_THRESHOLD, 256 << 20) == 0) mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

}  // namespace kprop
