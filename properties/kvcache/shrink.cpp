// The kvcache family's shrinker.
#include <algorithm>
#include <initializer_list>
#include <vector>

#include "properties/kvcache/family.h"

namespace kprop::kvcache {

// One shrink step, boldest first: fewer sequences, shorter sequences, earlier
// arrivals, fewer and narrower heads, smaller pages and chunks, plain data
// (nan poison, unit spreads and scales, seed 1, no exact int8 or dtype
// ties), then a
// tidy pool (identity order, no spare blocks). Pools grow when a candidate
// needs more blocks.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values&) {
  std::vector<Case> out;
  auto add = [&](Case s) { out.push_back(fit_pool(std::move(s))); };
  const size_t B = c.seqs.size();
  if (B > 1) {
    Case s = c;
    s.seqs.resize(B / 2);
    add(s);
    for (size_t b = 0; b < B; ++b) {
      Case t = c;
      t.seqs.erase(t.seqs.begin() + static_cast<long>(b));
      add(t);
    }
  }
  for (size_t b = 0; b < B; ++b) {
    const Sequence& q = c.seqs[b];
    for (auto change : std::initializer_list<void (*)(Sequence&)>{
             [](Sequence& s) { s.decode = 0; }, [](Sequence& s) { s.decode /= 2; },
             [](Sequence& s) { s.decode = std::max(0, s.decode - 1); }, [](Sequence& s) { s.prompt = 1; },
             [](Sequence& s) { s.prompt = std::max(1, s.prompt / 2); },
             [](Sequence& s) { s.prompt = std::max(1, s.prompt - 1); }, [](Sequence& s) { s.arrive = 0; },
             [](Sequence& s) { s.arrive = std::max(0, s.arrive - 1); }, [](Sequence& s) { s.seed = 1; }}) {
      Case s = c;
      change(s.seqs[b]);
      if (!(s.seqs[b] == q)) add(s);
    }
  }
  auto set = [&](auto member, auto value) {
    Case s = c;
    s.*member = value;
    add(s);
  };
  set(&Case::kv_heads, 1);
  set(&Case::kv_heads, c.kv_heads - 1);
  set(&Case::group, 1);
  set(&Case::group, c.group - 1);
  set(&Case::head_dim, 1);
  set(&Case::head_dim, c.head_dim / 2);
  set(&Case::head_dim, c.head_dim - 1);
  for (int p = 1; p < c.page_size; ++p) set(&Case::page_size, p);
  int longest_prompt = 0;
  for (const Sequence& s : c.seqs) longest_prompt = std::max(longest_prompt, s.prompt);
  if (c.chunk > longest_prompt) set(&Case::chunk, longest_prompt);  // the same single chunk, a smaller number
  for (int k = 1; k < std::min(c.chunk, longest_prompt + 1); ++k) set(&Case::chunk, k);
  // Wider dtypes first: f64, then f32 (the same data, less rounding; no
  // dtype ties, which only f16/bf16 cases have).
  for (DType wider : {DType::f64, DType::f32})
    if (wider == DType::f64 ? c.dtype != DType::f64 : is_half(c.dtype)) {
      Case s = c;
      s.dtype = wider, s.store_ties = 0;
      add(s);
    }
  set(&Case::poison, Poison::nan);
  set(&Case::q_scale, 1.0);
  set(&Case::k_spread, 1.0);
  set(&Case::v_spread, 1.0);
  set(&Case::seed, uint64_t{1});
  if (c.int8_ties > 0) set(&Case::int8_ties, 0.0);
  if (c.store_ties > 0) set(&Case::store_ties, 0.0);
  if (c.negative_scores) set(&Case::negative_scores, false);
  const int need = blocks_needed(c);
  if (static_cast<int>(c.pool.size()) > need) {  // drop spare blocks (the highest ids)
    Case s = c;
    std::erase_if(s.pool, [need](int b) { return b >= need; });
    add(s);
    s = c;
    const int top = static_cast<int>(c.pool.size()) - 1;
    std::erase(s.pool, top);
    add(s);
  }
  Case sorted = c;
  std::sort(sorted.pool.begin(), sorted.pool.end());
  add(sorted);
  std::erase_if(out, [&c](const Case& s) { return s == c || !validate(s).empty(); });
  return rc::seq::fromContainer(std::move(out));
}

}  // namespace kprop::kvcache
