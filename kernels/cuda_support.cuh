// Helpers every family's CUDA kernels share (nvcc only, C++17; the CUDA
// runtime and the standard library, nothing of kprop's core): the error
// check, the device count, device memory that is freed on every path, and
// exp/log overloaded for the float and double kernels of one template.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace kprop::cuda_support {

// Throws std::runtime_error("CUDA error in WHAT: ...") unless err is success.
inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}

// expf/logf for float, exp/log for double.
__device__ __forceinline__ float dev_exp(float x) {
  return expf(x);
}
__device__ __forceinline__ double dev_exp(double x) {
  return exp(x);
}
__device__ __forceinline__ float dev_log(float x) {
  return logf(x);
}
__device__ __forceinline__ double dev_log(double x) {
  return log(x);
}

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Asked once per process.
inline int device_count() {
  static const int count = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  return count;
}

// Device memory owned for one call: n elements of T (none for n = 0).
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    if (n) check(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  void upload(const T* host) {
    if (n) check(cudaMemcpy(ptr, host, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void download(T* host) const {
    if (n) check(cudaMemcpy(host, ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
};

// A call's device allocations of any types, all freed when it ends.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (int i = 0; i < count_; ++i) cudaFree(ptrs_[i]);
  }
  // n elements of T (at least one byte is allocated, so the pointer is valid).
  template <typename T>
  T* alloc(size_t n) {
    if (count_ == kMax) throw std::logic_error("cuda_support::DeviceBuffers: too many buffers");
    void* p = nullptr;
    check(cudaMalloc(&p, (n > 0 ? n : 1) * sizeof(T)), "cudaMalloc");
    ptrs_[count_++] = p;
    return static_cast<T*>(p);
  }
  template <typename T>
  T* upload(const T* h, size_t n) {
    T* d = alloc<T>(n);
    if (n > 0) check(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    return d;
  }

 private:
  static constexpr int kMax = 16;
  void* ptrs_[kMax] = {};
  int count_ = 0;
};

template <typename T>
void download(T* h, const T* d, size_t n) {
  if (n > 0) check(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

}  // namespace kprop::cuda_support
