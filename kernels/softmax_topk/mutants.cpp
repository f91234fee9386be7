// Mutants: each is the fused kernel (fused_with, softmax_topk.cpp) with
// exactly one FusedConfig switch (softmax_topk.h) flipped to a known bug
// (exp_in_f16_no_max: two, subtract_max and exp_in_storage).
#include "kernels/softmax_topk/softmax_topk.h"

namespace kprop::softmax_topk {

namespace {

template <void (*Change)(FusedConfig&)>
Result variant(const Case& c) {
  FusedConfig cfg;
  Change(cfg);
  return fused_with(c, cfg);
}

void cap32(FusedConfig& f) {
  f.cap = 32;
}
void no_max(FusedConfig& f) {
  f.subtract_max = false;
}
void tie_high(FusedConfig& f) {
  f.ties_to_lower = false;
}
void inverted(FusedConfig& f) {
  f.rescale_inverted = true;
}
void by_prob(FusedConfig& f) {
  f.order_by_probability = true;
}
void unsorted(FusedConfig& f) {
  f.sort_output = false;
}
void z_half(FusedConfig& f) {
  f.z_in_storage = true;
}
void drop_far(FusedConfig& f) {
  f.drop_far = true;
}
void f32_keys(FusedConfig& f) {
  f.f32_rank_keys = true;
}
void neg_zero_low(FusedConfig& f) {
  f.neg_zero_below_zero = true;
}
void f16_ftz(FusedConfig& f) {
  f.f16_inputs_ftz = true;
}
void exp_half(FusedConfig& f) {
  f.exp_in_storage = true;
}
void exp_half_no_max(FusedConfig& f) {
  f.subtract_max = false;
  f.exp_in_storage = true;
}

// Indices written through a uint16 output buffer (a kernel written for
// vocabularies below 2^16): an index of 65536 or more wraps (vocabularies of
// 128k-256k; specs/softmax_topk.yaml, profile large).
Result indices_u16(const Case& c) {
  Result r = fused(c);
  for (int& i : r.indices) i = static_cast<uint16_t>(i);
  return r;
}

}  // namespace

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> table = {
      {"k_capped_32", "running top-k holds at most 32 entries; output slots past 32 stay zero (index 0, p 0)",
       variant<cap32>},
      {"no_max_subtraction", "normaliser and probabilities from exp(x) without subtracting the running max",
       variant<no_max>},
      {"tie_high_index", "equal logits rank the higher index first", variant<tie_high>},
      {"negative_zero_below_zero",
       "logits ranked by their bit patterns (IEEE totalOrder, a radix select on float bits as PyTorch's CUDA "
       "top-k): -0.0 ranks below +0.0, so it loses its tie to a +0.0 at a higher index",
       variant<neg_zero_low>},
      {"f32_rank_keys",
       "f64 logits ranked by their f32 roundings (a radix select or packed (f32 key, index) word): logits "
       "f32 cannot tell apart rank by index",
       variant<f32_keys>},
      {"online_rescale_inverted", "running normaliser rescaled by exp(m_new - m_old) when the max grows",
       variant<inverted>},
      {"neg_inf_selected_early",
       "ranks by the rounded probability: a -inf logit ties with (and at a lower index beats) a finite logit "
       "whose "
       "probability underflowed to 0",
       variant<by_prob>},
      {"unsorted_output", "the K winners are returned in index order, not sorted by probability",
       variant<unsorted>},
      {"exp_in_f16_no_max",
       "softmax without max subtraction, each exp(x) rounded to the storage dtype: inf past 11.09 in f16, so "
       "inf / inf = NaN (f32, f64 cases: as no_max_subtraction)",
       variant<exp_half_no_max>},
      {"z_in_storage",
       "f16/bf16: the running normaliser summed in the storage type instead of f32 (small effect but on long "
       "flat rows)",
       variant<z_half>},
      {"indices_u16", "indices written through a uint16 buffer: an index >= 65536 wraps", indices_u16},
      // Below the max-norm floor (~8 eps): caught by each probability's own
      // relative bound (properties/softmax_topk/invariants.cpp).
      {"far_logits_zeroed",
       "exp(x - max) taken as 0 below -15 (a 'negligible term' fast path): a finite logit 16 below the max "
       "gets probability 0 instead of 1.1e-7",
       variant<drop_far>},
      // Within the store's relative bound where exp(x - max) is a normal
      // f16; past the absolute bound among the f16 subnormals (logits 9.7 to
      // 17 below the max), which the generator reaches on purpose
      // (properties/softmax_topk/build.cpp).
      {"exp_in_storage",
       "f16/bf16: each exp(x - max) rounded to the storage dtype before the sum and the division (the "
       "contract takes exp in f32): a logit 13 below the max in f16 gets its probability off by up to half "
       "an f16 subnormal step before the store rounds it again",
       variant<exp_half>},
      // Only the order of the subnormals changes (their probabilities are
      // within 2^-14 relative of a zero's, under an f16 ulp): seen where
      // distinct subnormals reach the top K, which the generator's
      // subnormal rows put there on purpose (properties/softmax_topk/build.cpp).
      {"f16_subnormal_ftz",
       "f16 logits loaded flush-to-zero: a subnormal (|x| < 2^-14) becomes a zero of its sign, so distinct "
       "subnormals tie with each other and with 0 and rank by index",
       variant<f16_ftz>},
  };
  return table;
}

}  // namespace kprop::softmax_topk
