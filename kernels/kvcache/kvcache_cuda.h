// Paged KV cache on a CUDA device. Two layers, as kernels/layernorm/layernorm_cuda.h:
//  * cuda_raw::run(Program): the block pool's K and V in device memory, a
//    scatter kernel for the writes and the paged decode-attention kernel.
//    kvcache_cuda.cu; plain C++17, no kprop, RapidCheck or yaml headers.
//  * cuda(Case): the scheduler, block tables, LIFO free list and statistics on
//    the host (kvcache_cuda.cpp), the cache and the attention on the device;
//    declared in kvcache.h.
// Both exist only when the family is built with CUDA (KPROP_HAVE_CUDA);
// registration turns "no device" into kprop::TargetUnavailable (skipped).
#pragma once

#include <vector>

namespace kprop::kvcache::cuda_raw {

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Cached after the first call.
int device_count();

// The case's dtype: the pool's storage type (f64 cases also attend in f64,
// the others in f32; outputs are rounded to it).
enum class Precision { f64, f32, f16, bf16 };

// A whole case for the device, planned on the host: the scheduler does not
// depend on what the device computes, so every step's writes and queries are
// known before the first launch. run() makes one device allocation, one
// upload and one download per case, and two launches per step (the K/V
// scatter, then the paged attention), in stream order: a step's queries see
// its own writes and every earlier step's, and a block reused after a
// release is overwritten only by later steps.
//
// The pool: `blocks` blocks of `page_size` token slots, each slot one token's
// K (and V) for every kv head: [block][page_size][kv_heads][head_dim]
// elements of the precision's storage type, every element initialised to the
// poison (rounded to it). Released blocks keep their contents.
struct Program {
  int blocks = 0, page_size = 1, kv_heads = 1, head_dim = 1, group = 1;
  double poison_key = 0, poison_value = 0;
  Precision precision = Precision::f64;
  // Writes, step after step: write i puts rows i of k and v ([writes][kv_heads
  // * head_dim]) in slot slots[i] (block * page_size + offset), rounded to
  // the storage type.
  std::vector<int> slots;
  std::vector<double> k, v;
  // Queries, step after step, each [kv_heads * group][head_dim] (q [queries]
  // [Hq][D]): query i sees keys 0 .. lengths[i] - 1 of the sequence whose
  // block table starts at tables[table_begin[i]] (key j lives in block
  // table[j / page_size], slot j % page_size); query head h reads kv head
  // h / group. Output row i = softmax(q·Kᵀ / sqrt(D)) V, online softmax over
  // 32-key chunks in f64 (f64 pools) or f32, rounded to the storage type.
  std::vector<int> table_begin, lengths, tables;
  std::vector<double> q;
  struct Step {
    int writes = 0, queries = 0;  // consecutive runs of the arrays above
  };
  std::vector<Step> steps;
};

// Runs every step; returns the outputs [queries][Hq][D]. Throws
// std::runtime_error on a CUDA error (or without a device) and on an
// inconsistent program.
std::vector<double> run(const Program& program);

}  // namespace kprop::kvcache::cuda_raw
