// Named tensors of kvcache for expression invariants (kprop/expr.h).
//
// Layout. Sequences have different lengths, so per-token tensors put the
// tokens of every sequence on one flat axis N (sequence 0's tokens first, in
// order); `seq[n]` and `pos[n]` say whose token n is and where. Outputs are
// [N, Hq, D] (Result::out concatenated); inputs q [N, Hq, D], k, v [N, Hkv, D]
// and, per query head, kh, vh [N, Hq, D] (GQA heads repeated).
#include <cmath>

#include "properties/kvcache/family.h"

namespace kprop::kvcache {

expr::TensorInfos Traits::tensor_infos() {
  expr::TensorInfos t = expr::tensor_table(R"(
Bs               []           int   sequences in the batch
Hq               []           int   query heads
Hkv              []           int   key/value heads (query head h reads kv head h / G)
G                []           int   query heads per kv head
D                []           int   head dimension
N                []           int   tokens over all sequences (the flat token axis)
NB               []           int   blocks in the paged pool
page_size        []           int   tokens per paged block
chunk            []           int   prompt tokens per chunk (chunked prefill)
blocks_needed    []           int   most blocks the schedule holds at once (full or chunked prefill)
prompt_lengths   [Bs]         int   prompt tokens P of each sequence
decode_steps     [Bs]         int   decode steps S of each sequence
arrivals         [Bs]         int   scheduler step of each sequence's prefill
seq              [N]          int   the sequence of token n
pos              [N]          int   token n's position in its sequence
page             [N]          int   token n's logical block in its sequence: pos // page_size
is_decode        [N]          bool  token n is decoded (pos >= its prompt length)
visible          [N, N]       bool  [n, m]: token n attends to token m (same sequence, pos <= pos[n])
block_order      [NB]         int   the paged pool's free list at start (a permutation of its blocks)
q                [N, Hq, D]   real  queries
k                [N, Hkv, D]  real  keys
v                [N, Hkv, D]  real  values
kh               [N, Hq, D]   real  the key each query head reads (k with GQA heads repeated)
vh               [N, Hq, D]   real  the value each query head reads
k_scale          [Hkv, D]     real  int8 cache's per-channel key scale (range / 127)
v_scale          [Hkv, D]     real  int8 cache's per-channel value scale (range / 127)
int8_bound       [N, Hq, D]   real  the derived bound on |int8 output - fp64 output|
                                    (properties/kvcache/invariants.cpp)
naive.out        [N, Hq, D]   real  the naive same-precision baseline (kvcache::naive: two-pass softmax in
                                    f32, outputs rounded to the dtype; f64 cases: the reference)
floor.out        [N, Hq, D]   real  the derived floor of an f32/f16/bf16 case's output error, f32_k = 2
                                    (properties/kvcache/invariants.cpp); 0 for f64 cases
dequantized.out  [N, Hq, D]   real  the reference run on the int8 cache's dequantized K/V: what an int8 cache
                                    must output
)");
  const expr::TensorInfos outputs = expr::tensor_table(R"(
out               [N, Hq, D]  real  attention output of every token
int8_cache        []          bool  the outputs carry int8 quantization error
blocks_allocated  []          int   paged blocks handed out (0: not paged)
blocks_reused     []          int   allocations that reused a block released earlier
block_table       [N]         int   the physical block holding token n (its sequence's block table at its
                                    page, logical -> physical); -1 when the implementation does not page
)");
  expr::add_per_implementation(t, {{"target", ""}, {"reference", ""}}, outputs);
  return t;
}

namespace {

using expr::DType;
using expr::Tensor;
using expr::TensorMap;

// Per-sequence [T_b, inner] blocks concatenated, or empty when one has the wrong size.
std::vector<double> flat(const Case& c, const std::vector<std::vector<double>>& per_seq, int64_t inner) {
  std::vector<double> out;
  if (per_seq.size() != c.seqs.size()) return out;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    if (static_cast<int64_t>(per_seq[b].size()) != c.seqs[b].tokens() * inner) return {};
    out.insert(out.end(), per_seq[b].begin(), per_seq[b].end());
  }
  return out;
}

void put_case(const Case& c, TensorMap& out) {
  const int64_t Bs = static_cast<int64_t>(c.seqs.size()), N = c.tokens(), Hq = c.q_heads(), Hkv = c.kv_heads,
                D = c.head_dim, NB = static_cast<int64_t>(c.pool.size());
  for (auto [name, value] : {std::pair{"Bs", Bs},
                             {"Hq", Hq},
                             {"Hkv", Hkv},
                             {"G", int64_t(c.group)},
                             {"D", D},
                             {"N", N},
                             {"NB", NB},
                             {"page_size", int64_t(c.page_size)},
                             {"chunk", int64_t(c.chunk)},
                             {"blocks_needed", int64_t(blocks_needed(c))}})
    out.put(name, Tensor::scalar(double(value), DType::integer));
  std::vector<double> prompts, decodes, arrivals, seq, pos, decode;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const Sequence& s = c.seqs[b];
    prompts.push_back(s.prompt), decodes.push_back(s.decode), arrivals.push_back(s.arrive);
    for (int t = 0; t < s.tokens(); ++t)
      seq.push_back(double(b)), pos.push_back(t), decode.push_back(t >= s.prompt);
  }
  if (out.wanted("page")) {
    std::vector<double> page;
    for (double p : pos) page.push_back(std::floor(p / c.page_size));
    out.put("page", Tensor::of({N}, std::move(page), DType::integer));
  }
  if (out.wanted("prompt_lengths")) out.put("prompt_lengths", Tensor::of({Bs}, prompts, DType::integer));
  if (out.wanted("decode_steps")) out.put("decode_steps", Tensor::of({Bs}, decodes, DType::integer));
  if (out.wanted("arrivals")) out.put("arrivals", Tensor::of({Bs}, arrivals, DType::integer));
  if (out.wanted("visible")) {
    std::vector<double> vis(size_t(N * N), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = n - int64_t(pos[size_t(n)]); m <= n; ++m) vis[size_t(n * N + m)] = 1;
    out.put("visible", Tensor::of({N, N}, std::move(vis), DType::boolean));
  }
  if (out.wanted("seq")) out.put("seq", Tensor::of({N}, std::move(seq), DType::integer));
  if (out.wanted("pos")) out.put("pos", Tensor::of({N}, std::move(pos), DType::integer));
  if (out.wanted("is_decode")) out.put("is_decode", Tensor::of({N}, std::move(decode), DType::boolean));
  if (out.wanted("block_order")) out.put("block_order", Tensor::ints({NB}, c.pool));
  if (out.wanted("q") || out.wanted("k") || out.wanted("v") || out.wanted("kh") || out.wanted("vh")) {
    auto [q, k, v] = batch_data(c);
    // K and V per query head (GQA: query head h reads kv head h / group).
    std::vector<double> kh, vh;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < Hq; ++h) {
        const size_t at = size_t((n * Hkv + h / c.group) * D);
        kh.insert(kh.end(), k.begin() + long(at), k.begin() + long(at + size_t(D)));
        vh.insert(vh.end(), v.begin() + long(at), v.begin() + long(at + size_t(D)));
      }
    out.put("q", Tensor::of({N, Hq, D}, std::move(q)));
    out.put("k", Tensor::of({N, Hkv, D}, std::move(k)));
    out.put("v", Tensor::of({N, Hkv, D}, std::move(v)));
    out.put("kh", Tensor::of({N, Hq, D}, std::move(kh)));
    out.put("vh", Tensor::of({N, Hq, D}, std::move(vh)));
  }
  if (out.wanted("k_scale") || out.wanted("v_scale")) {
    ChannelRanges s = int8_scales(c);
    out.put("k_scale", Tensor::of({Hkv, D}, std::move(s.k)));
    out.put("v_scale", Tensor::of({Hkv, D}, std::move(s.v)));
  }
  if (out.wanted("int8_bound")) out.put("int8_bound", Tensor::of({N, Hq, D}, flat(c, int8_bound(c), Hq * D)));
  if (out.wanted("naive.out")) out.put("naive.out", Tensor::of({N, Hq, D}, flat(c, naive(c).out, Hq * D)));
  if (out.wanted("floor.out"))
    out.put("floor.out", Tensor::of({N, Hq, D}, flat(c, storage_floor(c, reference(c), 2), Hq * D)));
  if (out.wanted("dequantized.out"))
    out.put("dequantized.out", Tensor::of({N, Hq, D}, flat(c, reference_dequantized(c).out, Hq * D)));
}

void put_result(const Case& c, const std::string& who, const Result& r, TensorMap& out) {
  const int64_t N = c.tokens(), Hq = c.q_heads(), D = c.head_dim;
  if (out.wanted(who + ".out")) out.put_output(who + ".out", {N, Hq, D}, flat(c, r.out, Hq * D));
  out.put(who + ".int8_cache", Tensor::scalar(r.int8_cache, DType::boolean));
  out.put(who + ".blocks_allocated", Tensor::scalar(r.blocks_allocated, DType::integer));
  out.put(who + ".blocks_reused", Tensor::scalar(r.blocks_reused, DType::integer));
  if (out.wanted(who + ".block_table")) {
    // Token n of sequence s at position p lives in block tables[s][p / page].
    std::vector<double> block;
    block.reserve(static_cast<size_t>(N));
    for (size_t s = 0; s < c.seqs.size(); ++s)
      for (int p = 0; p < c.seqs[s].tokens(); ++p) {
        const size_t page = static_cast<size_t>(p / c.page_size);
        const bool has = s < r.block_tables.size() && page < r.block_tables[s].size();
        block.push_back(has ? r.block_tables[s][page] : -1);
      }
    out.put(who + ".block_table", Tensor::of({N}, std::move(block), DType::integer));
  }
}

}  // namespace

void Traits::tensors(const Case& c, const Result* target, const Result* reference, TensorMap& out) {
  put_case(c, out);
  if (target) put_result(c, "target", *target, out);
  if (reference) put_result(c, "reference", *reference, out);
}

}  // namespace kprop::kvcache
