// Metamorphic transforms of a kvcache case (Traits::transforms()).
//
// reorder_sequences: the batch's sequences in a random order, each with its
// own seed (so its Q, K, V), lengths and arrival step. Every token's output
// depends only on its own sequence, so outputs move with their tokens:
// transformed token n is token token_perm[n]. The pool and its free list are
// kept (the peak of blocks held is a sum over sequences, so it still fits);
// which block a sequence gets changes, which a correct cache cannot see.
//
// change_block_size: another page size in [1, 8] (different from the case's
// when it can be) with a fresh pool sized for it and its free list shuffled.
// Outputs are unchanged up to rounding: the paged kernels tile the online
// softmax by page, so the summation order changes (fp64: the specs' fp64
// tolerance, rtol = atol = 1e-10, covers it); int8 codes do not depend on the
// layout.
#include <numeric>
#include <stdexcept>

#include "kprop/rng.h"
#include "properties/kvcache/family.h"

namespace kprop::kvcache {

const std::vector<TransformInfo>& Traits::transforms() {
  static const std::vector<TransformInfo> infos = {
      {"reorder_sequences",
       "permutes the batch's sequences (with their seeds, lengths and arrivals): outputs move with their "
       "tokens",
       {},
       {{"transform.seq_perm",
         {"Bs"},
         expr::DType::integer,
         "sequence i of the transformed case is sequence seq_perm[i]"},
        {"transform.token_perm",
         {"N"},
         expr::DType::integer,
         "flat token n of the transformed case is flat token token_perm[n]"},
        transform_applies_info("the batch has one sequence (no reordering moves one)")}},
      {"change_block_size",
       "another page size in [1, 8] with a fresh shuffled pool: outputs unchanged up to rounding",
       {},
       {{"transform.page_size", {}, expr::DType::integer, "the transformed case's page size"}},
       {"NB"}},
  };
  return infos;
}

Case Traits::transform(const std::string& name, const Case& c, const Values&, uint64_t seed,
                       expr::TensorMap& out) {
  Case t = c;
  if (name == "reorder_sequences") {
    const std::vector<int> perm = rng::moving_permutation(c.seqs.size(), seed, 1);
    std::vector<int> offset, tokens;
    int n = 0;
    for (const Sequence& s : c.seqs) offset.push_back(n), n += s.tokens();
    for (size_t i = 0; i < perm.size(); ++i) {
      t.seqs[i] = c.seqs[size_t(perm[i])];
      for (int k = 0; k < t.seqs[i].tokens(); ++k) tokens.push_back(offset[size_t(perm[i])] + k);
    }
    t = fit_pool(std::move(t));
    if (out.wanted("transform.seq_perm"))
      out.put("transform.seq_perm", expr::Tensor::ints({int64_t(perm.size())}, perm));
    if (out.wanted("transform.token_perm"))
      out.put("transform.token_perm", expr::Tensor::ints({int64_t(tokens.size())}, tokens));
    put_transform_applies(out, perm.size() >= 2);
  } else if (name == "change_block_size") {
    int page = 1 + static_cast<int>(rng::hash(seed, 2, 0) % 7);  // [1, 7]
    if (page >= c.page_size) ++page;                             // [1, 8] without the case's own
    t.page_size = page;
    t.pool.clear();
    t = fit_pool(std::move(t));
    const std::vector<int> shuffle = rng::permutation(t.pool.size(), seed, 3);
    for (size_t i = 0; i < shuffle.size(); ++i) t.pool[i] = shuffle[i];
    if (out.wanted("transform.page_size"))
      out.put("transform.page_size", expr::Tensor::scalar(page, expr::DType::integer));
  } else {
    throw std::logic_error("kvcache: no transform '" + name + "'");
  }
  if (const std::string why = validate(t); !why.empty())
    throw std::logic_error("kvcache: " + name + " made an invalid case: " + why);
  return t;
}

}  // namespace kprop::kvcache
