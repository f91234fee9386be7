// The beam family's domain: its schema, in_domain and the size of a case.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "properties/beam/family.h"

namespace kprop::beam {

Schema Traits::domain_schema() {
  return {
      field::int_range("batch", {1, 4}, 1, 1 << 16, "prompts per batch"),
      field::int_range("prompt_len", {1, 4}, 1, 1 << 20, "tokens per prompt"),
      field::int_range("vocab", {2, 32}, 2, 1 << 24, "vocabulary size (EOS included)"),
      field::map(
          "wide_vocab",
          {
              field::int_range("range", {33, 160}, 2, 1 << 24, "vocab drawn here (uniformly) instead"),
              field::real("rate", 0, 0, 1,
                          "probability the vocab comes from range, in any trial (not size-ramped): "
                          "sizes past a warp (32), a block of 64 or 128 lanes, where a kernel without a "
                          "loop over the row goes wrong; 0 draws nothing for it"),
          },
          "vocabularies past GPU widths in a fraction of the cases"),
      field::int_range("max_new_tokens", {1, 6}, 1, 64, "L: most generated tokens"),
      field::map(
          "beam_width",
          {
              field::int_range("range", {1, 8}, 1, 4096,
                               "K, drawn here unless one of the rates below applies"),
              field::real("one_rate", 0.2, 0, 1, "probability K = 1 (greedy)"),
              field::real("unpruned_rate", 0.3, 0, 1,
                          "probability K is set above the number of possible hypotheses (nothing pruned; "
                          "L is lowered until that number is at most unpruned_max)"),
              field::integer("unpruned_max", 200, 1, 100000, "largest hypothesis count made unpruned"),
          },
          "beam width K"),
      field::map("alpha",
                 {
                     field::real_range("range", {-1.0, 2.5}, -16, 16, "length penalty exponent"),
                     field::real("zero_rate", 0.25, 0, 1, "probability alpha = 0 (plain log-prob sum)"),
                     field::real("one_rate", 0.1, 0, 1, "probability alpha = 1 (mean log-prob)"),
                 },
                 "length penalty alpha"),
      field::map(
          "model",
          {
              field::real_range("scale", {0.3, 4.0}, 0, 100, "spread of the random logits"),
              field::real("tie_rate", 0.1, 0, 1, "probability scale = 0: every non-EOS token ties exactly"),
              field::real(
                  "eos_tie_rate", 0, 0, 1,
                  "probability, when scale = 0 is drawn, that EOS ties too (eos_bias and eos_slope 0, EOS "
                  "one of tokens 1 to 3, alpha = 1 in half of them): every token has log-prob -log V, so "
                  "at alpha = 1 a finished beam kept from an earlier step ties exactly with the new "
                  "expansions; 0 draws nothing for it"),
              field::real_range("eos_bias", {-2.0, 6.0}, -100, 100, "added to the EOS logit"),
              field::real_range("eos_slope", {-2.0, 1.0}, -100, 100,
                                "added to the EOS logit per prefix token (< 0: EOS early, then unlikely)"),
              field::real_range("sharpen", {0.0, 1.5}, 0, 100,
                                "spread grows by this per prefix token (long paths look better per token)"),
              field::real_range("shift", {0.0, 50.0}, 0, 1000,
                                "amplitude of a per-prefix constant on every logit"),
              field::real("shift_rate", 0.5, 0, 1, "probability the shift is non-zero"),
              field::real(
                  "prefix_free_rate", 0, 0, 1,
                  "probability the logits depend on the token alone (sharpen, eos_slope and shift 0): "
                  "every step's log-probs are one vector, so [x, y] and [y, x] tie exactly from parents "
                  "of different scores; 0 draws nothing for it"),
              field::real_range("mask", {2000.0, 10000.0}, 0, 1e6,
                                "how far a masked (banned) token's logit is lowered (model.mask_rate)"),
              field::real(
                  "mask_rate", 0, 0, 1,
                  "probability the model masks about one (prefix, token) in four, each lowered by "
                  "mask (drawn from model.mask; not a tie model): probabilities below the smallest "
                  "double, where log(softmax(x)) is -inf and log_softmax is not; 0 draws nothing for it"),
              field::real_range("near_tie", {1e-9, 1e-5}, 0x1p-52, 1,
                                "|gap| between the logits of a near-tied pair (model.near_tie_rate), drawn "
                                "log-uniformly"),
              field::real(
                  "near_tie_rate", 0, 0, 1,
                  "probability the second of the two smallest non-EOS tokens gets the first's logit plus "
                  "a gap from model.near_tie (sign a coin; vocab >= 3, not a tie model): the siblings "
                  "score that gap / len^alpha apart, which f64 resolves and float32 often does not; 0 "
                  "draws nothing for it"),
          },
          "the random table LM"),
  };
}

// The generator's exceptions to the ranges mirrored: a vocab of
// wide_vocab.range (wide_vocab.rate), K = 1 (one_rate), K above the
// hypothesis count with L lowered (unpruned_rate), alpha 0 or 1, scale 0
// (tie_rate) with eos_bias and eos_slope 0 (eos_tie_rate), shift 0, and a
// prefix-free model (prefix_free_rate) with sharpen, eos_slope and shift 0;
// a prefix-free model the domain does not draw is outside it, and so is a
// mask or near-tie one (model.mask_rate, model.near_tie_rate).
std::string Traits::in_domain(const Case& c, const Values& d) {
  const ModelConfig& m = c.model;
  const bool prefix_free = m.prefix_free && d.real("model.prefix_free_rate") > 0;
  if (m.prefix_free && !prefix_free) return "model.prefix_free is set but model.prefix_free_rate is 0";
  const int64_t all = count_hypotheses(m.vocab, c.max_new_tokens);
  const bool unpruned = d.real("beam_width.unpruned_rate") > 0 && c.beam_width >= all;
  if (std::string why = outside_int_range(d, "beam_width.range", c.beam_width);
      !why.empty() && !(c.beam_width == 1 && d.real("beam_width.one_rate") > 0) && !unpruned)
    return why;
  if (std::string why = outside_int_range(d, "max_new_tokens", c.max_new_tokens);
      !why.empty() && !(unpruned && c.max_new_tokens < d.int_range("max_new_tokens").lo))
    return why;
  if (std::string why = outside_real_range(d, "alpha.range", c.alpha);
      !why.empty() && !(c.alpha == 0 && d.real("alpha.zero_rate") > 0) &&
      !(c.alpha == 1 && d.real("alpha.one_rate") > 0))
    return why;
  if (std::string why = outside_real_range(d, "model.scale", m.scale);
      !why.empty() && !(m.scale == 0 && d.real("model.tie_rate") > 0))
    return why;
  if (std::string why = outside_real_range(d, "model.shift", m.shift);
      !why.empty() && !(m.shift == 0 && (d.real("model.shift_rate") < 1 || prefix_free)))
    return why;
  if (std::string why = outside_int_range(d, "batch", static_cast<int64_t>(c.prompts.size())); !why.empty())
    return why;
  for (const auto& p : c.prompts)
    if (std::string why = outside_int_range(d, "prompt_len", static_cast<int64_t>(p.size())); !why.empty())
      return why;
  if (m.mask != 0) {
    if (d.real("model.mask_rate") == 0) return "model.mask is set but model.mask_rate is 0";
    if (std::string why = outside_real_range(d, "model.mask", m.mask); !why.empty()) return why;
  }
  if (m.near_tie != 0) {
    if (d.real("model.near_tie_rate") == 0) return "model.near_tie is set but model.near_tie_rate is 0";
    if (std::string why = outside_real_range(d, "model.near_tie", std::fabs(m.near_tie)); !why.empty())
      return why;
  }
  const bool zero_of_prefix_free = prefix_free && m.eos_slope == 0 && m.sharpen == 0;
  const bool wide_vocab =
      d.real("wide_vocab.rate") > 0 && outside_int_range(d, "wide_vocab.range", m.vocab).empty();
  const bool eos_tied = m.scale == 0 && m.eos_bias == 0 && m.eos_slope == 0 && d.real("model.tie_rate") > 0 &&
                        d.real("model.eos_tie_rate") > 0;
  return first_problem(
      {wide_vocab ? "" : outside_int_range(d, "vocab", m.vocab),
       eos_tied ? "" : outside_real_range(d, "model.eos_bias", m.eos_bias),
       zero_of_prefix_free || eos_tied ? "" : outside_real_range(d, "model.eos_slope", m.eos_slope),
       zero_of_prefix_free ? "" : outside_real_range(d, "model.sharpen", m.sharpen)});
}

namespace {
// Bytes of one trial: per prompt and step K × V candidate scores (and their
// order), the pool trace (L pools of K hypotheses of up to L tokens), for the
// target and a check's rerun (x 2); the reference's candidates of one step
// of one prompt (reference.cpp: it ranks K × V Entry objects, 72 bytes each
// (prompt, Hypothesis, Prefix) plus its token vector's heap block, at least
// 32 bytes with malloc's header: 104 bytes where the 16 of a score and an
// index were counted, which put beam's peak at 1.49 × this estimate); and
// the exhaustive oracle (matches_exhaustive enumerates at most 20000
// hypotheses by default).
double beam_bytes(double batch, double prompt, double k, double vocab, double steps) {
  const double per_prompt = 16 * k * vocab + steps * k * (4 * (prompt + steps) + 32);
  const double token_block = std::max(32.0, 16 * std::ceil((4 * steps + 8) / 16));
  return 2 * batch * per_prompt + k * vocab * (72 + token_block) + 20000 * (4 * steps + 32);
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  size_t prompt = 0;
  for (const auto& p : c.prompts) prompt = std::max(prompt, p.size());
  return beam_bytes(double(c.prompts.size()), double(prompt), c.beam_width, c.model.vocab, c.max_new_tokens);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t batch = d.int_range("batch").hi, prompt = d.int_range("prompt_len").hi,
                steps = d.int_range("max_new_tokens").hi;
  int64_t vocab = d.int_range("vocab").hi;
  if (d.real("wide_vocab.rate") > 0) vocab = std::max(vocab, d.int_range("wide_vocab.range").hi);
  int64_t k = d.int_range("beam_width.range").hi;
  if (d.real("beam_width.unpruned_rate") > 0) k = std::max(k, d.integer("beam_width.unpruned_max") + 2);
  CaseSize size{beam_bytes(double(batch), double(prompt), double(k), double(vocab), double(steps)),
                fmt::format("batch {} x K {} x V {} x L {}", batch, k, vocab, steps),
                "batch, beam_width.range, vocab, wide_vocab.range or max_new_tokens"};
  // The named tensors' dims (tensors.cpp).
  size.extents = {{"B", double(batch)}, {"K", double(k)}, {"L", double(steps)}, {"V", double(vocab)}};
  return size;
}

}  // namespace kprop::beam
