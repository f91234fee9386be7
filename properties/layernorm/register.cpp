#include "kprop/determinism.h"
#include "properties/layernorm/family.h"

#if KPROP_HAVE_CUDA
#include "kernels/layernorm/layernorm_cuda.h"
#endif

namespace kprop::layernorm {
KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.reference("fp64, two passes per row (mean, then variance), for clarity", reference);
  f.optimized("fused",
              "one-pass Welford forward (16 lanes, Chan combine, shifted by x[0]) caching xhat and rstd; "
              "fused backward from the cache; f32 or f64 per case",
              fused);
  f.cuda(
      "one block per row: x shifted by x[0], two-pass mean/variance with tree reductions, "
      "x-hat cached; dx from the cache; dgamma/dbeta one thread per column; f32 or f64 per case; f16/bf16 "
      "on the f32 kernels, the x-hat cache rounded to the dtype on the device (the backward reads it), "
      "outputs rounded to the dtype",
      KPROP_CUDA_IMPL(Traits, cuda_raw::device_count, cuda));
  f.mutants(mutants());
  register_invariants(f);
  register_deterministic(f, [](const Result& r) {
    return std::vector<OutputView>{{"y", r.y},   {"xhat", r.xhat},     {"mean", r.mean},  {"rstd", r.rstd},
                                   {"dx", r.dx}, {"dgamma", r.dgamma}, {"dbeta", r.dbeta}};
  });
  // Output coverage (prop_runner --list --spec specs/layernorm.yaml).
  f.reads({{"matches_reference", {"y", "dx", "dgamma", "dbeta"}},
           {"saved_statistics", {"mean", "rstd"}},
           {"dx_sums_to_zero", {"dx"}},
           {"dbeta_is_sum_dy", {"dbeta"}},
           {"dgamma_is_sum_dy_xhat", {"xhat", "dgamma"}},
           {"backward_reads_stored_xhat", {"xhat", "rstd", "dx"}},
           {"y_from_unrounded_xhat", {"mean", "rstd", "y"}},
           {"constant_rows", {"xhat", "y"}},
           {"all_finite", {"*"}},
           {"finite_differences", {"dx", "dgamma", "dbeta"}}});
  register_external(f);
});

}  // namespace kprop::layernorm
