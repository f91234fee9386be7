// The kvcache family's domain: its schema, in_domain, check_domain and the size of a case.
#include <fmt/format.h>

#include <algorithm>

#include "properties/kvcache/family_parts.h"

namespace kprop::kvcache {

Schema Traits::domain_schema() {
  return {
      field::int_range("batch", {1, 6}, 1, 1 << 16, "sequences in the batch"),
      field::int_range("prompt_len", {1, 24}, 1, 1 << 24, "prompt tokens per sequence"),
      field::int_range("decode_steps", {0, 12}, 0, 1 << 24, "decode steps per sequence"),
      field::int_range("arrival", {0, 10}, 0, 1 << 24, "scheduler step at which a sequence arrives"),
      field::real(
          "edge_rate", 0.2, 0, 1,
          "probability of each edge value: a 1-token prompt, 0 decode steps, arrival at step 0, chunk 1"),
      field::int_range("kv_heads", {1, 3}, 1, 64, "key/value heads"),
      field::int_range("group", {1, 3}, 1, 64, "query heads per kv head (GQA)"),
      field::int_range("head_dim", {1, 16}, 1, 1 << 16, "channels per head"),
      field::int_range("page_size", {1, 8}, 1, 1 << 20, "tokens per paged block"),
      field::real("divisor_rate", 0.3, 0, 1, "probability the page size divides some sequence's length"),
      field::int_range("chunk", {1, 12}, 1, 1 << 24, "prompt tokens per prefill chunk"),
      field::int_range("spare_blocks", {0, 4}, 0, 1 << 20, "pool blocks beyond the peak the schedule holds"),
      field::choices("poison", {"nan", "huge"}, {"nan", "huge"}, "what unused cache slots hold"),
      field::real_range(
          "q_scale", {0.25, 256.0}, 1e-3, 1e3,
          "query magnitude (softmax sharpness), drawn log-uniformly: as many soft as sharp cases"),
      field::real_range("k_spread", {1, 100}, 1, 1e6, "key channel ranges are log-uniform in [1/spread, 1]"),
      field::real_range("v_spread", {1, 100}, 1, 1e6,
                        "value channel ranges are log-uniform in [1/spread, 1]"),
      field::real("int8_ties", 0.05, 0, 1,
                  "f64 cases: the probability that a K/V element (one of the 95% not drawn 2^-30 off a tie) "
                  "sits exactly on a rounding tie of its int8 code, x / s = k + 1/2 in double (k even and "
                  "odd, either sign), which the contract rounds to even; 0 puts none there"),
      field::real("store_ties", 0.05, 0, 1,
                  "f16/bf16 cases: the probability that a K/V element arrives (in f32) exactly halfway "
                  "between two values of the dtype, which the cache write rounds to even; 0 puts none there"),
      field::real("negative_scores", 0.1, 0, 1,
                  "the probability that a case puts every score of kv head 0 far below zero (its keys share "
                  "a sign per channel, its queries take the opposite one): each in [-L, -0.225 L], L = 4096 "
                  "in f64, 512 in f32 arithmetic, where every exp(score) underflows unless the max is "
                  "subtracted"),
      field::choices("dtypes", dtype_choices(), dtype_choices(),
                     "the case's dtype: f64 computes in fp64; f32/f16/bf16 store Q, the cache and the "
                     "outputs in the dtype and compute in f32 (kernels/kvcache/kvcache.h, Precision)"),
  };
}

// The generator's edge values (edge_rate) and its rounding of the reals to
// 1/64 mirrored; int8_ties and store_ties up to the domain's, negative
// scores where the domain draws them. The pool (spare blocks,
// order) is the case's own layout and not checked here.
std::string Traits::in_domain(const Case& c, const Values& d) {
  const bool edges = d.real("edge_rate") > 0;
  if (std::string why = outside_int_range(d, "batch", static_cast<int64_t>(c.seqs.size())); !why.empty())
    return why;
  for (const Sequence& s : c.seqs) {
    if (std::string why = outside_int_range(d, "prompt_len", s.prompt);
        !why.empty() && !(edges && s.prompt == 1))
      return why;
    if (std::string why = outside_int_range(d, "decode_steps", s.decode);
        !why.empty() && !(edges && s.decode == 0))
      return why;
    if (std::string why = outside_int_range(d, "arrival", s.arrive);
        !why.empty() && !(edges && s.arrive == 0))
      return why;
  }
  if (std::string why = outside_int_range(d, "chunk", c.chunk); !why.empty() && !(edges && c.chunk == 1))
    return why;
  auto real_in = [&](const char* key, double v, double floor) -> std::string {
    const RealRange r = d.real_range(key);
    const double lo = std::max(floor, tidy(r.lo) - 1.0 / 64), hi = std::max(floor, tidy(r.hi) + 1.0 / 64);
    if (v >= lo && v <= hi) return "";
    return fmt::format("{} = {} is outside [{}, {}]", key, v, r.lo, r.hi);
  };
  return first_problem(
      {outside_int_range(d, "kv_heads", c.kv_heads), outside_int_range(d, "group", c.group),
       outside_int_range(d, "head_dim", c.head_dim), outside_int_range(d, "page_size", c.page_size),
       outside_choices(d, "poison", c.poison == Poison::nan ? "nan" : "huge"),
       outside_choices(d, "dtypes", dtype_name(c.dtype)), real_in("q_scale", c.q_scale, 1.0 / 64),
       real_in("k_spread", c.k_spread, 1), real_in("v_spread", c.v_spread, 1),
       // The builder's rate (f64 cases), or none (the shrinker's, a case from before the field).
       c.int8_ties <= d.real("int8_ties")
           ? ""
           : fmt::format("int8_ties = {} is above the domain's {}", c.int8_ties, d.real("int8_ties")),
       c.store_ties <= d.real("store_ties")
           ? ""
           : fmt::format("store_ties = {} is above the domain's {}", c.store_ties, d.real("store_ties")),
       !c.negative_scores || d.real("negative_scores") > 0
           ? ""
           : "negative_scores is on; the domain's rate is 0"});
}

namespace {
// Doubles of one trial: per token Q and the outputs of Hq·D (target,
// reference, the reruns of the checks: about 5 results), K and V of Hkv·D
// (the case's, the paged pool's and a contiguous copy), and one row of
// scores of the longest sequence.
double kvcache_bytes(double tokens, double longest, double q_heads, double kv_heads, double dim) {
  return 8 * (tokens * dim * (6 * q_heads + 6 * kv_heads) + longest);
}
constexpr int64_t kMaxTokens = int64_t(1) << 15;  // validate()'s limit
}  // namespace

double Traits::case_bytes(const Case& c) {
  double tokens = 0, longest = 0;
  for (const Sequence& s : c.seqs) tokens += s.tokens(), longest = std::max(longest, double(s.tokens()));
  return kvcache_bytes(tokens, longest, c.q_heads(), c.kv_heads, c.head_dim);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const auto hi = [&](const char* key) { return d.int_range(key).hi; };
  const int64_t longest = hi("prompt_len") + hi("decode_steps"), tokens = hi("batch") * longest;
  CaseSize size{kvcache_bytes(double(tokens), double(longest), double(hi("kv_heads") * hi("group")),
                              double(hi("kv_heads")), double(hi("head_dim"))),
                fmt::format("{} sequences of {} tokens x {} query heads x D {}", hi("batch"), longest,
                            hi("kv_heads") * hi("group"), hi("head_dim")),
                "batch, prompt_len, decode_steps, kv_heads, group or head_dim"};
  // The named tensors' dims (tensors.cpp): N tokens in all; the pool holds
  // at most a block per token (page_size 1) plus its spares.
  size.extents = {{"Bs", double(hi("batch"))},
                  {"Hq", double(hi("kv_heads") * hi("group"))},
                  {"Hkv", double(hi("kv_heads"))},
                  {"G", double(hi("group"))},
                  {"D", double(hi("head_dim"))},
                  {"N", double(tokens)},
                  {"NB", double(tokens + hi("spare_blocks"))}};
  return size;
}

std::string Traits::check_domain(const Values& d) {
  const int64_t tokens =
      d.int_range("batch").hi * (d.int_range("prompt_len").hi + d.int_range("decode_steps").hi);
  if (tokens <= kMaxTokens) return "";
  return fmt::format(
      "the largest case of this domain holds batch x (prompt_len + decode_steps) = {} tokens, "
      "over the {} a case may hold; narrow batch, prompt_len or decode_steps",
      tokens, kMaxTokens);
}

}  // namespace kprop::kvcache
