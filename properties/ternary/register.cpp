#include "properties/ternary/family.h"

namespace kprop::ternary {

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.reference("fake-quant pipeline in double, written for clarity", reference);
  f.optimized("packed", "2-bit packed weights (4 per byte), int8 x ternary int matmul, f32 scaling", packed);
  f.optimized("packed_base3", "base-3 packed weights (5 per byte), same int matmul, f32 scaling",
              packed_base3);
  f.mutants(mutants());
  register_invariants(f);
  // Output coverage (prop_runner --list --spec specs/ternary.yaml).
  // w_q is read back through the packed bytes.
  f.tensor_outputs({{"w_q", {"w_packed"}}});
  f.reads({{"weights_ternary", {"w_packed", "w_scale"}},
           {"weight_scale_absmean", {"w_scale"}},
           {"activations_int8", {"x_scale", "x_q"}},
           {"integer_part_exact", {"w_packed", "x_q", "acc"}},
           {"output_matches_reference", {"w_packed", "w_scale", "y"}},
           {"ste_matches_dense", {"w_packed", "w_scale", "dx", "dw"}},
           {"ste_adjoint", {"w_packed", "x_scale", "x_q", "y", "dx", "dw"}},
           {"zeros_not_nan", {"w_packed", "x_q", "y", "dx", "dw"}},
           {"token_independence", {"x_q", "acc", "y"}}});
  register_external(f);
});

}  // namespace kprop::ternary
