// The beam family's one case builder.
#include <algorithm>
#include <cmath>
#include <vector>

#include "properties/beam/family.h"

namespace kprop::beam {

// One builder for RapidCheck draws and fuzz bytes, so the fuzzer reaches
// exactly the generator's domain.
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  ModelConfig& m = c.model;
  m.vocab = static_cast<int>(draw.sized(domain.int_range("vocab")));
  m.eos = draw.chance(0.5) ? 0 : static_cast<int>(draw.any(IntRange{0, m.vocab - 1}));
  m.seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  const bool tie = draw.chance(domain.real("model.tie_rate"));
  m.scale = tie ? 0.0 : draw.any(domain.real_range("model.scale"));
  m.eos_bias = draw.any(domain.real_range("model.eos_bias"));
  m.eos_slope = draw.any(domain.real_range("model.eos_slope"));
  // EOS ties too: every token's log-prob is -log V, so candidates ending in
  // EOS tie with the other expansions, and with alpha = 1 every hypothesis of
  // every length scores -log V: a finished beam kept from an earlier step
  // ties with this step's expansions (the drawn EOS logit never equals the
  // others' 0). Such a model's pools hold the lexicographically smallest
  // candidates, so EOS is one of tokens 1 to 3: a larger one seldom enters a
  // pool of K <= 8, and EOS 0 precedes every candidate it could tie with.
  // Drawn only for a tie model and only when the domain asks for it, so a
  // rate of 0 leaves every draw as it was.
  bool eos_tied = false;
  if (const double rate = domain.real("model.eos_tie_rate"); tie && rate > 0 && draw.chance(rate)) {
    eos_tied = true, m.eos_bias = 0, m.eos_slope = 0;
    m.eos = static_cast<int>(draw.any(IntRange{1, std::min(m.vocab - 1, 3)}));
  }
  m.sharpen = draw.any(domain.real_range("model.sharpen"));
  m.shift = draw.chance(domain.real("model.shift_rate")) ? draw.any(domain.real_range("model.shift")) : 0.0;
  // Drawn only when the domain asks for it: a rate of 0 leaves every draw,
  // and so every case of a seed, as it was.
  if (const double rate = domain.real("model.prefix_free_rate"); rate > 0 && draw.chance(rate))
    m.prefix_free = true, m.sharpen = 0, m.eos_slope = 0, m.shift = 0;
  const int drawn_l = static_cast<int>(draw.sized(domain.int_range("max_new_tokens")));
  c.max_new_tokens = drawn_l;
  const int batch = static_cast<int>(draw.sized(domain.int_range("batch")));
  for (int b = 0; b < batch; ++b) {
    const int len = static_cast<int>(draw.sized(domain.int_range("prompt_len")));
    std::vector<int> prompt;
    for (int i = 0; i < len; ++i) prompt.push_back(static_cast<int>(draw.any(IntRange{0, m.vocab - 1})));
    c.prompts.push_back(std::move(prompt));
  }
  const double a = draw.any(RealRange{0, 1});
  const double zero = domain.real("alpha.zero_rate"), one = domain.real("alpha.one_rate");
  c.alpha = a < zero ? 0.0 : a < zero + one ? 1.0 : draw.any(domain.real_range("alpha.range"));
  // Half the EOS-tied models take alpha = 1 (where the domain has it): the
  // lengths tie too, which is what puts a kept finished beam level with an
  // expansion (one case in 200 otherwise).
  if (eos_tied && one > 0 && draw.chance(0.5)) c.alpha = 1;
  const double k = draw.any(RealRange{0, 1});
  const double k_one = domain.real("beam_width.one_rate"), unpruned = domain.real("beam_width.unpruned_rate");
  const int64_t unpruned_max = domain.integer("beam_width.unpruned_max");
  const int drawn_k = static_cast<int>(draw.sized(domain.int_range("beam_width.range")));
  c.beam_width = drawn_k;
  int64_t over = -1;  // K - the hypothesis count, for an unpruned K
  auto unprune = [&] {
    while (c.max_new_tokens > 1 && count_hypotheses(m.vocab, c.max_new_tokens) > unpruned_max)
      --c.max_new_tokens;
    const int64_t all = count_hypotheses(m.vocab, c.max_new_tokens);
    if (all > unpruned_max) return false;
    if (over < 0) over = draw.any(IntRange{0, 2});
    c.beam_width = static_cast<int>(all + over);
    return true;
  };
  bool unpruned_k = false;
  if (k < k_one) {
    c.beam_width = 1;
  } else if (k < k_one + unpruned) {
    unpruned_k = unprune();
  }
  // A vocab past a warp (32) or a block of 64 or 128 lanes, in any trial
  // (the size ramp would leave such sizes to a run's last cases). Drawn last
  // and only when the domain asks for it, so every other case of a seed is
  // drawn as before (a rate of 0: every case). The tokens and EOS drawn
  // below the old vocab stay as they are; an unpruned K is recounted (L lowered
  // further), or K and L are the drawn ones if no L fits unpruned_max.
  if (const double rate = domain.real("wide_vocab.rate"); rate > 0 && draw.chance(rate)) {
    m.vocab = static_cast<int>(draw.any(domain.int_range("wide_vocab.range")));
    // A range reaching below the drawn vocab (a user's domain): ids past the new one clamp.
    m.eos = std::min(m.eos, m.vocab - 1);
    for (auto& p : c.prompts)
      for (int& t : p) t = std::min(t, m.vocab - 1);
    if (unpruned_k && !unprune()) c.beam_width = drawn_k, c.max_new_tokens = drawn_l;
  }
  // A kept finished beam at a tied pruning boundary. In an EOS-tied model
  // at alpha = 1 every candidate ties and the pools hold the
  // lexicographically smallest, so with EOS 1 and V = K - 1 step 1 keeps
  // every token, [1] finished among them, and step 2 ranks [0, *] (V of
  // them), then [1], then V² - 2V more expansions: the contract keeps [1]
  // at rank V + 1 = K, and a kernel that lets a finished beam lose a tie
  // drops it there (mutant finished_lose_ties survived every seed; a larger
  // V, or EOS 2 or 3, puts more than K candidates before [1]). Only such
  // cases are changed, and with no draw, so every other case of a seed is
  // drawn as before; never outside the domain's vocab and max_new_tokens.
  if (const IntRange v = domain.int_range("vocab"); eos_tied && c.alpha == 1 && !unpruned_k &&
                                                    c.beam_width >= 4 && c.beam_width - 1 >= v.lo &&
                                                    c.beam_width - 1 <= v.hi) {
    m.vocab = c.beam_width - 1, m.eos = 1;
    for (auto& p : c.prompts)
      for (int& t : p) t = std::min(t, m.vocab - 1);
    if (domain.int_range("max_new_tokens").hi >= 2) c.max_new_tokens = std::max(c.max_new_tokens, 2);
  }
  // Masked (banned) tokens, about one (prefix, token) in four lowered by
  // model.mask: log-probs near -mask, whose probabilities underflow a double
  // (a log(softmax(x)) gives -inf; mutant log_of_softmax survived every seed
  // with logits never more than a few hundred apart). Unpruned cases return
  // every hypothesis, masked ones included, so their scores are checked.
  // Drawn after everything else and only when the domain asks for it, so
  // the other cases of a seed are drawn as before; never for a tie model
  // (scale 0), whose exact ties (and EOS's) the tie mutants need whole.
  if (const double rate = domain.real("model.mask_rate"); !tie && rate > 0 && draw.chance(rate))
    m.mask = draw.any(domain.real_range("model.mask"));
  // Near-tied siblings: of the two smallest non-EOS tokens a < b, b's logit
  // is a's plus a gap (ModelConfig::near_tie), |gap| log-uniform over
  // model.near_tie, its sign a coin, so [.., b] scores above [.., a] in half
  // the models: an order that a float32 sort key (mutant score_f32_keys)
  // sees as a tie and breaks by tokens, the wrong way. Drawn last,
  // likewise, and not for a tie model (it would untie a tied pair:
  // ties_keep_later_token took 24 trials, not 8, at seed 20261122), nor for
  // vocab 2 (no two tokens but EOS).
  if (const double rate = domain.real("model.near_tie_rate");
      !tie && m.vocab >= 3 && rate > 0 && draw.chance(rate)) {
    const RealRange r = domain.real_range("model.near_tie");
    const double gap = std::exp(draw.any(RealRange{std::log(r.lo), std::log(r.hi)}));
    m.near_tie = std::clamp(gap, r.lo, r.hi) * (draw.chance(0.5) ? -1 : 1);
  }
  return c;
}

}  // namespace kprop::beam
