// kprop::tune_allocator (src/kprop/allocator.h): a freed tensor-sized block
// stays with the process for the next case, not handed back to the kernel.
#include "kprop/allocator.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstddef>
#include <cstdlib>
#include <vector>

#include "kprop/sanitizer.h"

namespace kprop {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// One case's worth of tensors: `count` blocks of `bytes` held at once (an
// expression's temporaries), every page written, then all freed, last
// first. Opaque to the optimizer, which may otherwise drop the pairs.
void one_case(int count, size_t bytes) {
  std::vector<char*> blocks;
  for (int b = 0; b < count; ++b) {
    char* p = static_cast<char*>(std::malloc(bytes));
    ASSERT_NE(p, nullptr);
    for (size_t i = 0; i < bytes; i += 512) p[i] = static_cast<char>(i);
    asm volatile("" : : "r"(p) : "memory");
    blocks.push_back(p);
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
}

// 32 cases of 16 blocks of 256 KiB (1,024 pages in all) fault those pages in
// about once with the settings. With glibc's defaults the blocks come from
// the heap once the first free has raised its mmap threshold to 256 KiB, but
// the heap's top is trimmed above twice that, so each case faults nearly all
// of them in again (about 32,000). KPROP_ALLOCATOR_TEST_DEFAULTS=1 runs the
// test without the settings, to see it fail.
TEST(Allocator, ACasesFreedTensorsAreReusedNotFaultedInAgain) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "the settings are glibc's";
#endif
  if (kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer has its own allocator";
  if (!std::getenv("KPROP_ALLOCATOR_TEST_DEFAULTS")) tune_allocator();
  const int count = 16;
  const size_t bytes = size_t(256) << 10, pages = count * bytes / 4096;
  one_case(count, bytes);  // the first case may fault every page
  const long before = minor_faults();
  for (int c = 0; c < 32; ++c) one_case(count, bytes);
  EXPECT_LT(minor_faults() - before, long(4 * pages));
}

}  // namespace
}  // namespace kprop
