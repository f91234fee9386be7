// The cached engine: a scheduler stepping a batch through a KV cache, three
// cache layouts, and one attention kernel (online softmax over key tiles;
// for the paged layout one tile is one page, as a paged-attention kernel
// walks the block table). Non-f64 cases (kvcache.h, Precision): the
// scheduler rounds each K/V row to the dtype before the cache write, and
// attention runs in f32, its outputs rounded to the dtype when stored.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <stdexcept>

#include "kernels/kvcache/kvcache.h"
#include "kprop/errors.h"
#include "kprop/half.h"

namespace kprop::kvcache {
namespace {

constexpr int kTile = 16;  // key tile of the contiguous layouts

struct Dims {
  size_t Hkv, D;
  explicit Dims(const Case& c) : Hkv(static_cast<size_t>(c.kv_heads)), D(static_cast<size_t>(c.head_dim)) {}
  size_t token() const { return Hkv * D; }  // one token's K (or V), all kv heads
};

size_t capacity(const Case& c) {
  int cap = 0;
  for (const Sequence& s : c.seqs) cap = std::max(cap, s.tokens());
  return static_cast<size_t>(cap);
}

// A padded [B][capacity][Hkv][D] cache, unused slots poisoned.
class ContiguousCache {
 public:
  ContiguousCache(const Case& c, const Engine&)
      : dims_(c),
        cap_(capacity(c)),
        k_(c.seqs.size() * cap_ * dims_.token(), poison_key(c.poison)),
        v_(k_.size(), poison_value(c.poison, c.dtype)) {}
  int tile() const { return kTile; }
  void write(size_t b, int t, const double* k, const double* v, bool) {
    std::copy(k, k + dims_.token(), &k_[slot(b, t)]);
    std::copy(v, v + dims_.token(), &v_[slot(b, t)]);
  }
  const double* key(size_t b, int j, size_t h) { return &k_[slot(b, j) + h * dims_.D]; }
  const double* value(size_t b, int j, size_t h) { return &v_[slot(b, j) + h * dims_.D]; }
  void release(size_t) {}
  void stats(Result&) const {}

 private:
  size_t slot(size_t b, int t) const { return (b * cap_ + static_cast<size_t>(t)) * dims_.token(); }
  Dims dims_;
  size_t cap_;
  std::vector<double> k_, v_;
};

// A pool of fixed-size blocks, per-sequence block tables and a free list
// (LIFO: a released block is the next one handed out). Released blocks keep
// their stale contents.
class PagedCache {
 public:
  PagedCache(const Case& c, const Engine& e)
      : dims_(c),
        page_(c.page_size),
        last_block_offset_(e.last_block_offset),
        table_entries_4096_(e.table_entries_4096),
        k_(c.pool.size() * static_cast<size_t>(page_) * dims_.token(), poison_key(c.poison)),
        v_(k_.size(), poison_value(c.poison, c.dtype)),
        free_(c.pool.begin(), c.pool.end()),
        tables_(c.seqs.size()),
        released_(c.seqs.size(), 0),
        was_released_(c.pool.size(), false) {}
  int tile() const { return page_; }
  void write(size_t b, int t, const double* k, const double* v, bool decode) {
    auto& table = tables_[b];
    int block, offset = t % page_;
    if (last_block_offset_ && decode) {
      block = table.back();  // taken before the new block is allocated
      if (offset == 0) table.push_back(allocate());
    } else {
      if (offset == 0) table.push_back(allocate());
      block = table[entry(t / page_)];
    }
    std::copy(k, k + dims_.token(), &k_[slot(block, offset)]);
    std::copy(v, v + dims_.token(), &v_[slot(block, offset)]);
  }
  const double* key(size_t b, int j, size_t h) { return &k_[where(b, j) + h * dims_.D]; }
  const double* value(size_t b, int j, size_t h) { return &v_[where(b, j) + h * dims_.D]; }
  // Returns the blocks not yet released to the free list; the table itself
  // is left alone (it is dead once the sequence has finished).
  void release(size_t b) {
    auto& table = tables_[b];
    for (size_t i = released_[b]; i < table.size(); ++i) {
      free_.push_front(table[i]);
      was_released_[static_cast<size_t>(table[i])] = true;
    }
    released_[b] = table.size();
  }
  void stats(Result& r) const {
    r.blocks_allocated = allocated_;
    r.blocks_reused = reused_;
    r.block_tables = tables_;
  }

 private:
  int allocate() {
    if (free_.empty()) throw std::runtime_error("paged KV cache: pool exhausted");
    const int block = free_.front();
    free_.pop_front();
    ++allocated_;
    reused_ += was_released_[static_cast<size_t>(block)];
    return block;
  }
  size_t slot(int block, int offset) const {
    return (static_cast<size_t>(block) * static_cast<size_t>(page_) + static_cast<size_t>(offset)) *
           dims_.token();
  }
  size_t where(size_t b, int j) const { return slot(tables_[b][entry(j / page_)], j % page_); }
  // The table entry of logical block l (the mutant's table has 4096 entries
  // and wraps: a sequence past 4096 blocks overwrites its first blocks).
  size_t entry(int l) const { return static_cast<size_t>(table_entries_4096_ ? l % 4096 : l); }

  Dims dims_;
  int page_;
  bool last_block_offset_;
  bool table_entries_4096_;
  std::vector<double> k_, v_;
  std::deque<int> free_;
  std::vector<std::vector<int>> tables_;
  std::vector<size_t> released_;
  std::vector<bool> was_released_;
  int allocated_ = 0, reused_ = 0;
};

// A padded int8 cache; unused slots hold the invalid code -128. Reads
// dequantize one head's channels into a scratch row.
class Int8Cache {
 public:
  Int8Cache(const Case& c, const Engine& e)
      : dims_(c),
        cap_(capacity(c)),
        scales_(int8_scales(c, e.per_tensor_scale)),
        quantize_(e.quantize_in_f32   ? quantize_f32
                  : e.round_half_away ? quantize_half_away
                                      : quantize),
        k_(c.seqs.size() * cap_ * dims_.token(), static_cast<int8_t>(-128)),
        v_(k_.size(), static_cast<int8_t>(-128)),
        kbuf_(dims_.D),
        vbuf_(dims_.D) {}
  int tile() const { return kTile; }
  void write(size_t b, int t, const double* k, const double* v, bool) {
    const size_t at = slot(b, t);
    for (size_t i = 0; i < dims_.token(); ++i) {
      k_[at + i] = quantize_(k[i], scales_.k[i]);
      v_[at + i] = quantize_(v[i], scales_.v[i]);
    }
  }
  const double* key(size_t b, int j, size_t h) { return load(k_, scales_.k, b, j, h, kbuf_); }
  const double* value(size_t b, int j, size_t h) { return load(v_, scales_.v, b, j, h, vbuf_); }
  void release(size_t) {}
  void stats(Result& r) const { r.int8_cache = true; }

 private:
  size_t slot(size_t b, int t) const { return (b * cap_ + static_cast<size_t>(t)) * dims_.token(); }
  const double* load(const std::vector<int8_t>& codes, const std::vector<double>& scale, size_t b, int j,
                     size_t h, std::vector<double>& buf) const {
    const size_t at = slot(b, j) + h * dims_.D;
    for (size_t d = 0; d < dims_.D; ++d) buf[d] = codes[at + d] * scale[h * dims_.D + d];
    return buf.data();
  }
  Dims dims_;
  size_t cap_;
  ChannelRanges scales_;
  int8_t (*quantize_)(double, double);  // quantize, or a mutant's (quantize_in_f32, round_half_away)
  std::vector<int8_t> k_, v_;
  std::vector<double> kbuf_, vbuf_;
};

// One query head over keys [lo, n) of sequence b, tile by tile, in Acc
// (double for f64 cases, float otherwise): running max m, running sum l and
// accumulator rescaled by exp(m_old - m_new), scores scaled by alpha.
// `in_storage` (a mutant) rounds l and the accumulator to the dtype after
// every update; `no_max` (a mutant) keeps m at 0, so exp(s) overflows once a
// score passes the type's log of its largest value (88.7 in f32);
// `max_init_zero` (a mutant) starts m at 0 rather than -inf, so m is never
// below 0 and when every score is below the type's log of its least value
// (-745 in f64, -104 in f32) every exp underflows: l = 0 and out = 0 / 0.
template <typename Acc, typename Cache>
void attend(Cache& cache, size_t b, size_t kv_head, const double* q, int lo, int n, size_t D, Acc* out,
            std::vector<Acc>& s, DType in_storage, Acc alpha, bool no_max = false,
            bool max_init_zero = false) {
  const int tile = cache.tile();
  const bool keep = in_storage != DType::f64;
  auto store = [in_storage](Acc x) { return static_cast<Acc>(round_to(in_storage, static_cast<double>(x))); };
  Acc m = no_max || max_init_zero ? Acc(0) : -std::numeric_limits<Acc>::infinity(), l = 0;
  std::fill(out, out + D, Acc(0));
  for (int start = lo / tile * tile; start < n; start += tile) {
    const int a = std::max(start, lo), e = std::min(start + tile, n);
    Acc tile_max = -std::numeric_limits<Acc>::infinity();
    for (int j = a; j < e; ++j) {
      const double* k = cache.key(b, j, kv_head);
      Acc dot = 0;
      for (size_t d = 0; d < D; ++d) dot += static_cast<Acc>(q[d]) * static_cast<Acc>(k[d]);
      s[static_cast<size_t>(j - a)] = alpha * dot;
      tile_max = std::max(tile_max, alpha * dot);
    }
    const Acc m_new = no_max ? Acc(0) : std::max(m, tile_max);
    const Acc correction = std::exp(m - m_new);  // 0 on the first tile
    l *= correction;
    if (keep) l = store(l);
    for (size_t d = 0; d < D; ++d) out[d] = keep ? store(out[d] * correction) : out[d] * correction;
    for (int j = a; j < e; ++j) {
      const Acc p = std::exp(s[static_cast<size_t>(j - a)] - m_new);
      const double* v = cache.value(b, j, kv_head);
      l += p;
      if (keep) l = store(l);
      for (size_t d = 0; d < D; ++d) {
        out[d] += p * static_cast<Acc>(v[d]);
        if (keep) out[d] = store(out[d]);
      }
    }
    m = m_new;
  }
  for (size_t d = 0; d < D; ++d) out[d] /= l;
}

// A K or V element as the cache write stores it: rounded to the dtype (the
// truncate_bf16 mutant truncates a bf16 cache's f32 input instead; the
// half_away_bf16 mutant rounds its ties away from zero).
double cache_store(DType dtype, const Engine& e, double x) {
  if (e.truncate_bf16 && dtype == DType::bf16)
    return half::bf16_to_double(half::bf16_truncate(static_cast<float>(x)));
  if (e.half_away_bf16 && dtype == DType::bf16)
    return half::bf16_to_double(half::bf16_round_half_away(static_cast<float>(x)));
  return round_to(dtype, x);
}

// An output as stored: rounded to the dtype (half_away_bf16: ties away).
double output_store(DType dtype, const Engine& e, double x) {
  if (e.half_away_bf16 && dtype == DType::bf16)
    return half::bf16_to_double(half::bf16_round_half_away(static_cast<float>(x)));
  return round_to(dtype, x);
}

template <typename Cache, typename Acc>
Result run_with(const Case& c, const Engine& e) {
  const size_t B = c.seqs.size(), D = static_cast<size_t>(c.head_dim);
  const size_t Hq = static_cast<size_t>(c.q_heads()), g = static_cast<size_t>(c.group);
  const size_t token = static_cast<size_t>(c.kv_heads) * D;
  std::vector<std::shared_ptr<const Tensors>> data;
  BatchSchedule batch(c.seqs, e.chunked ? c.chunk : 0);
  Result r;
  for (size_t b = 0; b < B; ++b) {
    data.push_back(shared_sequence_data(c, b));
    r.out.emplace_back(static_cast<size_t>(c.seqs[b].tokens()) * Hq * D);
  }
  Cache cache(c, e);
  std::vector<Acc> scratch(static_cast<size_t>(std::max(cache.tile(), 1))), acc(D);
  std::vector<double> krow(token), vrow(token);
  for (int step = 0; step <= batch.last_step(); ++step) {
    const auto [work, finishing] = batch.take(step);
    if (e.stale_block_reuse)
      for (size_t b : finishing) cache.release(b);
    int padded = 0;  // the padded batch's key width for this step's decodes
    for (const auto& [b, w] : work) {
      const int P = c.seqs[b].prompt;
      for (int t = w.begin; t < w.end; ++t) {
        const size_t at = static_cast<size_t>(t) * token;
        for (size_t i = 0; i < token; ++i) {
          krow[i] = cache_store(c.dtype, e, data[b]->k[at + i]);
          vrow[i] = cache_store(c.dtype, e, data[b]->v[at + i]);
        }
        cache.write(b, t, krow.data(), vrow.data(), t >= P);
        if (t >= P) padded = std::max(padded, t + 1);
      }
    }
    for (const auto& [b, w] : work) {
      const int P = c.seqs[b].prompt;
      for (int t = w.begin; t < w.end; ++t) {
        const bool decode = t >= P;
        const int lo = e.chunk_ignores_past && !decode ? w.begin : 0;
        int n = t + 1;
        if (decode && e.decode_off_by_one) n = t;
        if (decode && e.padding_leak) n = padded;
        const DType in_storage = decode && e.decode_acc_in_storage ? c.dtype : DType::f64;
        // 1/sqrt(D) in Acc; the scale_in_storage mutant rounds it to the
        // dtype first (exact for D a power of 4, 1.07e-4 relative otherwise).
        const double exact_alpha = 1 / std::sqrt(static_cast<double>(D));
        const auto alpha =
            static_cast<Acc>(e.scale_in_storage ? round_to(c.dtype, exact_alpha) : exact_alpha);
        for (size_t h = 0; h < Hq; ++h) {
          const size_t row = static_cast<size_t>(t) * Hq + h;
          attend(cache, b, h / g, &data[b]->q[row * D], lo, n, D, acc.data(), scratch, in_storage, alpha,
                 e.no_max, e.max_init_zero);
          double* dst = &r.out[b][row * D];
          for (size_t d = 0; d < D; ++d) dst[d] = output_store(c.dtype, e, static_cast<double>(acc[d]));
        }
      }
    }
    for (size_t b : finishing) cache.release(b);
  }
  cache.stats(r);
  return r;
}

template <typename Cache>
Result run_in(const Case& c, const Engine& e) {
  return c.dtype == DType::f64 ? run_with<Cache, double>(c, e) : run_with<Cache, float>(c, e);
}

}  // namespace

Result run(const Case& c, const Engine& e) {
  if (const std::string why = validate(c); !why.empty()) throw std::invalid_argument("kvcache case: " + why);
  switch (e.layout) {
    case Layout::contiguous:
      return run_in<ContiguousCache>(c, e);
    case Layout::paged:
      return run_in<PagedCache>(c, e);
    case Layout::int8:
      if (c.dtype != DType::f64)
        throw Unsupported(fmt::format("the int8 cache quantizes fp64 K/V: it takes f64 cases, not {}",
                                      dtype_name(c.dtype)));
      return run_with<Int8Cache, double>(c, e);
  }
  throw std::logic_error("unknown layout");
}

Result contiguous(const Case& c) {
  return run(c, {Layout::contiguous});
}
Result paged(const Case& c) {
  return run(c, {Layout::paged});
}
Result chunked_prefill(const Case& c) {
  return run(c, {Layout::paged, true});
}
Result int8(const Case& c) {
  return run(c, {Layout::int8});
}

}  // namespace kprop::kvcache
