// The CUDA paged engine: the scheduler, block tables, LIFO free list and
// block statistics on the host, exactly as the CPU `paged` engine
// (engine.cpp) with full prefill; the block pool, the K/V writes and the
// attention on the device (kvcache_cuda.cu). Each step writes every scheduled
// token's K/V in one scatter launch, then runs every scheduled token (prefill
// tokens too, each as a query over its own first t + 1 keys) through one
// paged decode-attention launch. Every dtype: the pool stores K/V in it and
// attention runs in f32 for non-f64 cases (kvcache_cuda.h). Compiled to
// nothing without CUDA.
#if KPROP_HAVE_CUDA
#include "kernels/kvcache/kvcache_cuda.h"

#include <algorithm>
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
  std::vector<Tensors> data;
  std::vector<std::vector<Work>> plans;
  int last_step = 0;
  Result r;
  for (size_t b = 0; b < B; ++b) {
    data.push_back(sequence_data(c, b));
    plans.push_back(schedule(c.seqs[b], 0));
    last_step = std::max(last_step, plans[b].back().step);
    r.out.emplace_back(static_cast<size_t>(c.seqs[b].tokens()) * Hq * D);
  }

  const auto precision = c.dtype == DType::f32    ? cuda_raw::Precision::f32
                         : c.dtype == DType::f16  ? cuda_raw::Precision::f16
                         : c.dtype == DType::bf16 ? cuda_raw::Precision::bf16
                                                  : cuda_raw::Precision::f64;
  cuda_raw::PagedPool pool(static_cast<int>(c.pool.size()), page, c.kv_heads, c.head_dim,
                           poison_key(c.poison), poison_value(c.poison, c.dtype), precision);
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

  std::vector<size_t> next(B, 0);  // each sequence's next work item
  std::vector<int> slots, table_begin, lengths, flat_tables;
  std::vector<double> k, v, q, out;
  for (int step = 0; step <= last_step; ++step) {
    std::vector<std::pair<size_t, Work>> work;
    std::vector<size_t> finishing;
    for (size_t b = 0; b < B; ++b)
      if (next[b] < plans[b].size() && plans[b][next[b]].step == step) {
        work.push_back({b, plans[b][next[b]++]});
        if (next[b] == plans[b].size()) finishing.push_back(b);
      }
    // Writes: every scheduled token's K/V, allocating a block at each page start.
    slots.clear(), k.clear(), v.clear();
    for (const auto& [b, w] : work)
      for (int t = w.begin; t < w.end; ++t) {
        if (t % page == 0) tables[b].push_back(allocate());
        slots.push_back(tables[b][static_cast<size_t>(t / page)] * page + t % page);
        const size_t at = static_cast<size_t>(t) * token;
        k.insert(k.end(), data[b].k.begin() + at, data[b].k.begin() + at + token);
        v.insert(v.end(), data[b].v.begin() + at, data[b].v.begin() + at + token);
      }
    pool.write(static_cast<int>(slots.size()), slots.data(), k.data(), v.data());
    // Attention: token t of sequence b over its keys 0 .. t through b's table.
    table_begin.clear(), lengths.clear(), flat_tables.clear(), q.clear();
    for (const auto& [b, w] : work) {
      const int begin = static_cast<int>(flat_tables.size());
      flat_tables.insert(flat_tables.end(), tables[b].begin(), tables[b].end());
      for (int t = w.begin; t < w.end; ++t) {
        table_begin.push_back(begin);
        lengths.push_back(t + 1);
        const size_t at = static_cast<size_t>(t) * Hq * D;
        q.insert(q.end(), data[b].q.begin() + at, data[b].q.begin() + at + Hq * D);
      }
    }
    out.resize(q.size());
    pool.attend(static_cast<int>(lengths.size()), c.group, q.data(), table_begin.data(), lengths.data(),
                flat_tables.data(), static_cast<int>(flat_tables.size()), out.data());
    size_t row = 0;
    for (const auto& [b, w] : work)
      for (int t = w.begin; t < w.end; ++t, ++row)
        std::copy(out.begin() + row * Hq * D, out.begin() + (row + 1) * Hq * D,
                  r.out[b].begin() + static_cast<size_t>(t) * Hq * D);
    // Finished sequences return their blocks (LIFO) at the end of the step.
    for (size_t b : finishing)
      for (int block : tables[b]) {
        free_list.push_front(block);
        was_released[static_cast<size_t>(block)] = true;
      }
  }
  r.block_tables = tables;
  return r;
}

}  // namespace kprop::kvcache
#endif
