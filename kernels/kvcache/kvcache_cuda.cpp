// The CUDA paged engine: the scheduler, block tables, LIFO free list and
// block statistics on the host, exactly as the CPU `paged` engine
// (engine.cpp) with full prefill; the block pool, the K/V writes and the
// attention on the device (kvcache_cuda.cu). The host plans every step first
// (cuda_raw::Program), then the device runs them in stream order with one
// upload and one download per case: each step writes every scheduled token's
// K/V in one scatter launch, then runs every scheduled token (prefill tokens
// too, each as a query over its own first t + 1 keys) through one paged
// decode-attention launch. Every dtype: the pool stores K/V in it and
// attention runs in f32 for non-f64 cases (kvcache_cuda.h). Compiled to
// nothing without CUDA.
#if KPROP_HAVE_CUDA
#include "kernels/kvcache/kvcache_cuda.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kvcache/kvcache.h"

namespace kprop::kvcache {

Result cuda(const Case& c) {
  if (const std::string why = validate(c); !why.empty()) throw std::invalid_argument("kvcache case: " + why);
  const size_t B = c.seqs.size(), D = static_cast<size_t>(c.head_dim);
  const size_t Hq = static_cast<size_t>(c.q_heads()), token = static_cast<size_t>(c.kv_heads) * D;
  const int page = c.page_size;
  std::vector<std::shared_ptr<const Tensors>> data;
  BatchSchedule batch(c.seqs, 0);
  Result r;
  for (size_t b = 0; b < B; ++b) {
    data.push_back(shared_sequence_data(c, b));
    r.out.emplace_back(static_cast<size_t>(c.seqs[b].tokens()) * Hq * D);
  }

  cuda_raw::Program prog;
  prog.precision = c.dtype == DType::f32    ? cuda_raw::Precision::f32
                   : c.dtype == DType::f16  ? cuda_raw::Precision::f16
                   : c.dtype == DType::bf16 ? cuda_raw::Precision::bf16
                                            : cuda_raw::Precision::f64;
  prog.blocks = static_cast<int>(c.pool.size()), prog.page_size = page;
  prog.kv_heads = c.kv_heads, prog.head_dim = c.head_dim, prog.group = c.group;
  prog.poison_key = poison_key(c.poison), prog.poison_value = poison_value(c.poison, c.dtype);
  std::deque<int> free_list(c.pool.begin(), c.pool.end());
  std::vector<bool> was_released(c.pool.size(), false);
  std::vector<std::vector<int>> tables(B);
  auto allocate = [&] {
    if (free_list.empty()) throw std::runtime_error("paged KV cache: pool exhausted");
    const int block = free_list.front();
    free_list.pop_front();
    ++r.blocks_allocated;
    r.blocks_reused += was_released[static_cast<size_t>(block)];
    return block;
  };

  // The whole run is planned here (the schedule does not depend on the
  // device's results), then runs on the device in one go.
  struct Query {
    size_t b;
    int t;
  };
  std::vector<Query> queries;  // the device's output rows, in order
  for (int step = 0; step <= batch.last_step(); ++step) {
    const auto [work, finishing] = batch.take(step);
    cuda_raw::Program::Step st;
    // Writes: every scheduled token's K/V, allocating a block at each page start.
    for (const auto& [b, w] : work)
      for (int t = w.begin; t < w.end; ++t) {
        if (t % page == 0) tables[b].push_back(allocate());
        prog.slots.push_back(tables[b][static_cast<size_t>(t / page)] * page + t % page);
        const size_t at = static_cast<size_t>(t) * token;
        prog.k.insert(prog.k.end(), data[b]->k.begin() + at, data[b]->k.begin() + at + token);
        prog.v.insert(prog.v.end(), data[b]->v.begin() + at, data[b]->v.begin() + at + token);
        ++st.writes;
      }
    // Attention: token t of sequence b over its keys 0 .. t through b's
    // table as it is at this step.
    for (const auto& [b, w] : work) {
      const int begin = static_cast<int>(prog.tables.size());
      prog.tables.insert(prog.tables.end(), tables[b].begin(), tables[b].end());
      for (int t = w.begin; t < w.end; ++t) {
        prog.table_begin.push_back(begin);
        prog.lengths.push_back(t + 1);
        const size_t at = static_cast<size_t>(t) * Hq * D;
        prog.q.insert(prog.q.end(), data[b]->q.begin() + at, data[b]->q.begin() + at + Hq * D);
        queries.push_back({b, t});
        ++st.queries;
      }
    }
    prog.steps.push_back(st);
    // Finished sequences return their blocks (LIFO) at the end of the step.
    for (size_t b : finishing)
      for (int block : tables[b]) {
        free_list.push_front(block);
        was_released[static_cast<size_t>(block)] = true;
      }
  }
  const std::vector<double> out = cuda_raw::run(prog);
  for (size_t row = 0; row < queries.size(); ++row)
    std::copy(out.begin() + static_cast<std::ptrdiff_t>(row * Hq * D),
              out.begin() + static_cast<std::ptrdiff_t>((row + 1) * Hq * D),
              r.out[queries[row].b].begin() +
                  static_cast<std::ptrdiff_t>(static_cast<size_t>(queries[row].t) * Hq * D));
  r.block_tables = tables;
  return r;
}

}  // namespace kprop::kvcache
#endif
