// Whether a family's `cuda` implementation can run here, for the tests that
// need a device (the families' own CUDA tests; tests/specs/cuda_target_test.cpp
// holds the checks every `cuda` implementation shares).
#pragma once

#if KPROP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kprop::testing {

// Built with CUDA (KPROP_HAVE_CUDA) and a device present. A test that needs
// one GTEST_SKIPs without it: reported SKIPPED, never passed.
inline bool cuda_device_present() {
#if KPROP_HAVE_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

}  // namespace kprop::testing
