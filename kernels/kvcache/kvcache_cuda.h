// Paged KV cache on a CUDA device. Two layers, as kernels/layernorm/layernorm_cuda.h:
//  * cuda_raw::PagedPool: the block pool's K and V in device memory, a
//    scatter kernel for the writes and the paged decode-attention kernel.
//    kvcache_cuda.cu; plain C++17, no kprop, RapidCheck or yaml headers.
//  * cuda(Case): the scheduler, block tables, LIFO free list and statistics on
//    the host (kvcache_cuda.cpp), the cache and the attention on the device;
//    declared in kvcache.h.
// Both exist only when the family is built with CUDA (KPROP_HAVE_CUDA);
// registration turns "no device" into kprop::TargetUnavailable (skipped).
#pragma once

namespace kprop::kvcache::cuda_raw {

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Cached after the first call.
int device_count();

// The case's dtype: the pool's storage type (f64 cases also attend in f64,
// the others in f32; outputs are rounded to it).
enum class Precision { f64, f32, f16, bf16 };

// `blocks` blocks of `page_size` token slots, each slot one token's K (and V)
// for every kv head: [block][page_size][kv_heads][head_dim] elements of the
// precision's storage type, every element initialised to the poison (rounded
// to it). Released blocks keep their contents.
// Every method throws std::runtime_error on a CUDA error (or without a device).
class PagedPool {
 public:
  PagedPool(int blocks, int page_size, int kv_heads, int head_dim, double poison_key, double poison_value,
            Precision precision = Precision::f64);
  ~PagedPool();
  PagedPool(const PagedPool&) = delete;
  PagedPool& operator=(const PagedPool&) = delete;

  // Writes n tokens: slot i (block * page_size + offset) gets k, v rows i of
  // the host arrays [n][kv_heads * head_dim], rounded to the storage type.
  void write(int n, const int* slots, const double* k, const double* v);

  // Decode attention for n queries, each [group * kv_heads][head_dim] (host
  // q [n][Hq][D]): query i sees keys 0 .. lengths[i] - 1 of the sequence whose
  // block table starts at tables[table_begin[i]] (key j lives in block
  // table[j / page_size], slot j % page_size); query head h reads kv head
  // h / group. out (host) [n][Hq][D] = softmax(q·Kᵀ / sqrt(D)) V, online
  // softmax over 32-key chunks in f64 (f64 pools) or f32, each output
  // rounded to the storage type.
  void attend(int n, int group, const double* q, const int* table_begin, const int* lengths,
              const int* tables, int tables_size, double* out);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace kprop::kvcache::cuda_raw
