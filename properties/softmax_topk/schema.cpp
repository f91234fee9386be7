// The softmax_topk family's domain: its schema, in_domain and the size of a case.
#include <fmt/format.h>

#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {

Schema Traits::domain_schema() {
  return {
      field::renamed(field::choices("dtypes", {"f16", "bf16", "f32", "f64"}, {"f16", "bf16", "f32", "f64"},
                                    "input dtypes (the fused kernel computes in the dtype; f16/bf16 in f32, "
                                    "probabilities stored in the dtype)"),
                     "dtype"),
      field::int_range("rows", {1, 4}, 1, 1 << 24, "rows per case"),
      field::int_range("vocab", {1, 100}, 1, 1 << 24, "V: logits per row"),
      field::real("k_above_32_rate", 0.3, 0, 1,
                  "probability K is drawn from [33, V] when V > 32 (fixed-cap structures)"),
      field::int_range("block", {1, 64}, 1, 1 << 24, "fused kernel block width (online max/normaliser step)"),
      field::map(
          "values",
          {
              field::int_range(
                  "magnitude_log2", {-20, 100}, -120, 1000,
                  "scale exponent of the logit grid (clamped per dtype): huge magnitudes overflow exp(x)"),
              field::int_range("offset_log2", {3, 22}, 0, 22,
                               "row offsets +-2^j in grid units: large logits with small differences"),
              field::int_range("tie_levels", {2, 8}, 2, 1 << 20,
                               "distinct values in a row drawn for exact ties"),
              field::real_range("neg_inf_rate", {0.0, 0.8}, 0, 1,
                                "fraction of -inf logits in rows that have some"),
          },
          "logit rows: grid values q * 2^e (shift-exact), exact ties, offsets, -inf entries, all -inf rows; "
          "in f64, a third of the rows split ties by 2^-29 relative (distinct in f64, one value in f32); in "
          "f16, a quarter of the cases move most of each row 9.7 to 17 below its max (exp(x - max) an f16 "
          "subnormal), and another quarter turn one row's finite nonzero logits into f16 subnormals (either "
          "sign)"),
  };
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  return first_problem({outside_choices(d, "dtypes", dtype_name(c.dtype)),
                        outside_int_range(d, "rows", c.rows()), outside_int_range(d, "vocab", c.vocab),
                        outside_int_range(d, "block", c.block)});
}

namespace {
// Bytes of one trial: the logits, three results of K ≤ V probabilities and
// indices (target, reference, the K = V full sort), the implementation
// running (its logits, probabilities and indices in its dtype: ≤ 24 bytes a
// logit), and two softmax rows. bench/case_memory.py measures the peak
// against this: 38 MB of 45 at rows 2 x V 262144, fused.
double softmax_bytes(double rows, double vocab) {
  return 8 * rows * vocab + 3 * 16 * rows * vocab + 24 * rows * vocab + 2 * 8 * vocab;
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  return softmax_bytes(c.rows(), c.vocab);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t rows = d.int_range("rows").hi, vocab = d.int_range("vocab").hi;
  CaseSize size{softmax_bytes(double(rows), double(vocab)), fmt::format("rows {} x V {}", rows, vocab),
                "rows or vocab"};
  // The named tensors' dims (tensors.cpp); K, at most V, counted as V.
  size.extents = {{"R", double(rows)}, {"V", double(vocab)}, {"K", double(vocab)}};
  return size;
}

}  // namespace kprop::softmax_topk
