// The scratch allocator every attention kernel takes its buffers from. It
// counts the bytes live at once and keeps the high-water mark, so
// "no Nq×Nk buffer" is measured on each run instead of trusted from the code.
//
//   Workspace ws;
//   {
//     auto s = ws.take<float>(block_q * block_k);  // 64-byte aligned, zeroed
//     ...
//   }                                               // returned here
//   ws.peak_bytes();                                // most bytes ever live
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace kprop::attention {

class Workspace {
 public:
  template <typename T>
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Workspace* ws, size_t n) : ws_(ws), n_(n) {
      const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      data_ = static_cast<T*>(std::aligned_alloc(64, bytes ? bytes : 64));
      if (!data_) throw std::bad_alloc();
      std::memset(static_cast<void*>(data_), 0, bytes);
      ws_->acquire(n * sizeof(T));
    }
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept {
      std::swap(ws_, o.ws_);
      std::swap(data_, o.data_);
      std::swap(n_, o.n_);
      return *this;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() {
      if (data_) {
        std::free(data_);
        ws_->release(n_ * sizeof(T));
      }
    }
    T* data() const { return data_; }
    T& operator[](size_t i) const { return data_[i]; }
    size_t size() const { return n_; }

   private:
    Workspace* ws_ = nullptr;
    T* data_ = nullptr;
    size_t n_ = 0;
  };

  template <typename T>
  Buffer<T> take(size_t n) {
    return Buffer<T>(this, n);
  }
  size_t live_bytes() const { return live_; }
  size_t peak_bytes() const { return peak_; }

 private:
  void acquire(size_t bytes) {
    live_ += bytes;
    if (live_ > peak_) peak_ = live_;
  }
  void release(size_t bytes) { live_ -= bytes; }
  size_t live_ = 0, peak_ = 0;
};

}  // namespace kprop::attention
