#include <string>

#include "kprop/determinism.h"
#include "properties/attention/family.h"

#if KPROP_HAVE_CUDA
#include "kernels/attention/attention_bwd_cuda.h"
#include "kernels/attention/attention_cuda.h"
#endif

namespace kprop::attention {
namespace {
// Declines (Unsupported) the f16/bf16 cases the CUDA tensor-core kernels do
// not take; `which`: "forward" or "backward". A scale that rounds to 0 in
// f32 would reach them as 0, which they read as 1/sqrt(D).
[[maybe_unused]] void tensor_core_takes(const Case& c, const char* which) {
  if (!is_half(c.dtype)) return;
  const std::string kernel = std::string("the CUDA tensor-core ") + which + " (f16/bf16)";
  if (c.shape.dim != 64 && c.shape.dim != 128) throw Unsupported(kernel + " takes D = 64 or 128");
  if (c.mask == MaskKind::boolean) throw Unsupported(kernel + " has no boolean mask");
  if (static_cast<float>(effective_scale(c)) == 0)
    throw Unsupported(kernel + " takes no scale that rounds to 0 in f32");
}

#if KPROP_HAVE_CUDA
// Runs a CUDA kernel on `c`, declining what it cannot launch: a forward's
// grid is (query tiles, heads_q, batch), and CUDA caps a grid's y and z at
// 65535 (the domain allows more of either; `forward_grid`: the f32/f64
// forward, and every f16/bf16 kernel, which starts with the tensor-core
// forward); a head dimension no tile fits in shared memory (DeviceLimit).
template <typename Run>
auto launchable(const Case& c, bool forward_grid, Run run) {
  if (forward_grid && (c.shape.heads_q > 65535 || c.shape.batch > 65535))
    throw Unsupported("the CUDA forward's grid takes at most 65535 heads_q and 65535 batch entries");
  try {
    return run();
  } catch (const cuda_raw::DeviceLimit& e) {
    throw Unsupported(e.what());
  }
}
#endif
}  // namespace

KPROP_REGISTER_FAMILY(FwdTraits, [](FamilyDef<FwdTraits>& f) {
  f.reference("fp64, materialized row by row, written for clarity", reference_forward);
  f.optimized("tiled",
              "online softmax over Bq×Bk tiles from the case (f32, f64; f16/bf16 stored, f32 arithmetic)",
              tiled);
  f.cuda(
      "f32/f64: one block per (q tile, head, batch), the case's Bq×Bk tiles in shared memory, "
      "online softmax with exact empty-row handling; f16/bf16: the tensor-core kernel (on sm_90 the "
      "warp-specialized wgmma one, 128×128 tiles; else mma.sync, 128×64), f32 accumulation, P and O "
      "rounded to the dtype; D = 64 or 128, no boolean mask",
      KPROP_CUDA_IMPL(FwdTraits, cuda_raw::device_count, [](const Case& c) {
        tensor_core_takes(c, "forward");
        return launchable(c, true, [&] { return cuda_forward(c); });
      }));
  f.mutants(forward_mutants());
  register_forward_invariants(f);
  register_deterministic(f, [](const FwdResult& r) {
    return std::vector<OutputView>{{"o", r.o}, {"lse", r.lse}};
  });
  // Output coverage (prop_runner --list --spec specs/attention_fwd.yaml).
  f.reads({{"matches_reference", {"o", "lse"}},
           {"tile_size_invariance", {"o", "lse"}},
           {"masked_rows_zero", {"o", "lse"}},
           {"finite_outputs", {"o", "lse"}},
           {"shift_invariance", {"o"}},  // LSE moves with a key shift by design
           {"permutation_equivariance", {"o", "lse"}},
           {"o_rounded_to_nearest", {"o"}},
           {"workspace_bounded", {}}});  // the workspace measure, no output
  register_forward_external(f);
});

KPROP_REGISTER_FAMILY(BwdTraits, [](FamilyDef<BwdTraits>& f) {
  f.reference("fp64, materialized row by row, written for clarity", reference_backward);
  f.optimized("tiled_d", "tiled forward, then one pass over KV tiles with D = rowsum(dO ⊙ O)", tiled_d);
  f.optimized(
      "tiled_two_pass",
      "tiled forward, then rowsum(P ⊙ dP) in a first pass over the tiles and the gradients in a second",
      tiled_two_pass);
  f.cuda(
      "CUDA, FlashAttention-2 order: forward, D = rowsum(dO ⊙ O) pre-pass, dK/dV one block per "
      "(batch, kv head, key tile) over the group's query heads and tiles, dQ in a separate kernel per "
      "query tile (no atomics: deterministic). f32/f64: one thread per row in the forward, the case's "
      "Bq×Bk tiles in shared memory; f16/bf16: the tensor-core forward, then WMMA 64×64 tiles with f32 "
      "accumulation, P and dS rounded to the dtype before their products; D = 64 or 128, no boolean mask",
      KPROP_CUDA_IMPL(BwdTraits, cuda_bwd_raw::device_count, [](const Case& c) {
        tensor_core_takes(c, "backward");
        return launchable(c, is_half(c.dtype), [&] { return cuda_backward(c); });
      }));
  f.mutants(backward_mutants());
  register_backward_invariants(f);
  register_deterministic(f, [](const BwdResult& r) {
    return std::vector<OutputView>{{"dq", r.dq}, {"dk", r.dk},   {"dv", r.dv},
                                   {"o", r.o},   {"lse", r.lse}, {"d", r.d}};
  });
  // Output coverage (prop_runner --list --spec specs/attention_bwd.yaml).
  f.reads({{"matches_reference", {"dq", "dk", "dv"}},
           {"finite_differences", {"dq", "dk", "dv"}},
           {"D_identity", {"d"}},
           {"D_from_own_forward", {"d"}},
           {"dk_sums_to_zero", {"dk"}},
           {"dv_sums_to_do", {"dv"}},
           {"masked_rows_zero", {"dq", "dk", "dv"}},
           {"finite_outputs", {"dq", "dk", "dv"}},
           {"tile_size_invariance", {"dq", "dk", "dv"}},
           {"shift_invariance", {"dq", "dk", "dv"}},
           {"permutation_equivariance", {"dq", "dk", "dv"}},
           {"dv_rounded_to_nearest", {"dv"}},
           {"dq_dk_rounded_to_nearest", {"dq", "dk"}},
           {"workspace_bounded", {}}});  // the workspace measure, no output
  register_backward_external(f);
});

}  // namespace kprop::attention
