#include "kprop/determinism.h"
#include "properties/kvcache/family.h"

#if KPROP_HAVE_CUDA
#include "kernels/kvcache/kvcache_cuda.h"
#endif

namespace kprop::kvcache {
KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.reference("full attention recomputed from scratch for every token, fp64", reference);
  f.optimized("contiguous", "padded per-sequence cache, online softmax over key tiles", contiguous);
  f.optimized("paged", "block pool, block tables, LIFO free list; one page per softmax tile", paged);
  f.optimized("chunked_prefill", "paged cache; prompts prefilled one chunk per step", chunked_prefill);
  f.optimized("int8",
              "int8 cache, static per-channel scales, codes nearbyint(x / s) (ties to even), dequantized in "
              "attention; takes f64 cases only (the spec's --profile int8 draws those)",
              int8);
  f.cuda(
      "paged cache on a CUDA device (K/V stored in the dtype, attention in f64 for f64 cases, "
      "else f32): scheduler, block tables and LIFO free list on the "
      "host; pool, K/V writes and paged decode attention (one warp per query head, keys read "
      "through the block table, online softmax over 32-key chunks) on the device; prefill "
      "tokens go through the same kernel, each over its own first t + 1 keys",
      KPROP_CUDA_IMPL(Traits, cuda_raw::device_count, cuda));
  f.mutants(mutants());
  register_invariants(f);
  register_deterministic(f, [](const Result& r) {
    std::vector<OutputView> out;
    for (size_t b = 0; b < r.out.size(); ++b) out.push_back({"out[" + std::to_string(b) + "]", r.out[b]});
    out.push_back({"blocks_allocated", {double(r.blocks_allocated)}});
    return out;
  });
  // Output coverage (prop_runner --list --spec specs/kvcache.yaml):
  // cache_dtype says which cache the kernel kept, which decides the bound.
  f.tensor_outputs({{"int8_cache", {"cache_dtype"}}});
  f.reads({{"matches_reference", {"out", "cache_dtype"}},
           {"int8_error_bound", {"out", "cache_dtype"}},
           {"paged_matches_contiguous", {"out"}},
           {"chunked_matches_full_prefill", {"out"}},
           {"sequence_independence", {"out"}},
           {"decode_matches_prefill", {"out"}},
           {"output_in_value_hull", {"out"}}});
  register_external(f);
});

}  // namespace kprop::kvcache
