// Beam invariants. Scores are always recomputed from the model by the checker
// (rescore), never taken from the target. Comparisons between two runs accept
// any order among near-tied hypotheses; where a near-tie at a pruning
// boundary could change which beams survive, the case is discarded.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "kprop/tolerance.h"
#include "properties/beam/family.h"

namespace kprop::beam {
namespace {

using T = Trial<Traits>;

Field tie_field() {
  return field::real(
      "tie_margin", 1e-9, 0, 1,
      "relative score gap below which two hypotheses are near-tied: discarded or accepted either "
      "way, never failed");
}

std::string text(const std::vector<int>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

double margin(double tie, double score) {
  return tie * std::max(1.0, std::fabs(score));
}

// Discards when a pruning decision of the reference run was a near-tie (a
// different but equally correct rounding could keep other beams). Exact ties
// (gap 0) are settled by the contract's lexicographic rule, so they count as
// decided unless `exact_too` (the case will be perturbed, e.g. shifted).
std::optional<Verdict> near_tie_discard(T& t, double tie, bool exact_too) {
  for (const Beams& b : t.reference().prompts) {
    double scale = 1;  // gaps are relative to the scores' magnitude
    for (const Hypothesis& h : b.hypotheses) scale = std::max(scale, std::fabs(h.score));
    const double g = b.prune_margin;
    if (std::isfinite(g) && g < tie * scale && (exact_too || g > 0))
      return Verdict::discard(fmt::format("near-tie at a pruning boundary (gap {:.3g})", g));
  }
  return std::nullopt;
}

// The contract's rule for an exact tie, checked on the target's own result:
// a sibling that ties a kept hypothesis in any arithmetic (the same tokens
// but the last, neither EOS, whose logits after that prefix are bitwise
// equal: one logit row, so equal log-probabilities, scores and length
// penalty however a kernel computes them) and comes first
// lexicographically is kept, and ranked before it. Rounding decides no such
// tie: the lexicographic rule does. (Comparisons with another run accept
// any order within a margin, which a gap of 0 is: a kernel keeping [0], [2]
// of three tied candidates passed at K >= 2.)
std::string tie_break_violation(const TableLM& model, const std::vector<int>& prompt,
                                const std::vector<Hypothesis>& got) {
  const int eos = model.config().eos, V = model.vocab();
  std::vector<double> logits(static_cast<size_t>(V));
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<int>& h = got[i].tokens;
    if (h.empty() || h.back() == eos ||
        std::any_of(h.begin(), h.end(), [&](int x) { return x < 0 || x >= V; }))
      continue;  // valid_hypotheses judges malformed ones
    Prefix p = model.start(prompt);
    for (size_t k = 0; k + 1 < h.size(); ++k) p = model.push(p, h[k]);
    model.logits(p, logits.data());
    for (int x = 0; x < h.back(); ++x) {
      if (x == eos || logits[static_cast<size_t>(x)] != logits[static_cast<size_t>(h.back())]) continue;
      std::vector<int> first = h;
      first.back() = x;
      const auto before = std::find_if(got.begin(), got.begin() + static_cast<long>(i),
                                       [&](const Hypothesis& g) { return g.tokens == first; });
      if (before != got.begin() + static_cast<long>(i)) continue;
      const bool kept =
          std::any_of(got.begin(), got.end(), [&](const Hypothesis& g) { return g.tokens == first; });
      return fmt::format(
          "{} is kept at rank {}, but {}, which ties it exactly (one prefix, equal logits), {}: the "
          "contract's "
          "lexicographic rule keeps it first",
          text(h), i, text(first), kept ? "is ranked after it" : "is not kept");
    }
  }
  return "";
}

// "" when `got` ranks like `expected` up to near-ties, else why not.
std::string compare_ranked(const TableLM& model, const std::vector<int>& prompt, double alpha, double tie,
                           const std::vector<Hypothesis>& expected, const std::vector<Hypothesis>& got) {
  if (got.size() != expected.size())
    return fmt::format("{} hypotheses, expected {}", got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].tokens == expected[i].tokens) continue;
    const double se = rescore(model, prompt, expected[i].tokens, alpha).score;
    const double sg = rescore(model, prompt, got[i].tokens, alpha).score;
    if (std::fabs(se - sg) > margin(tie, se))
      return fmt::format("rank {}: {} (score {:.6g}), expected {} (score {:.6g})", i, text(got[i].tokens), sg,
                         text(expected[i].tokens), se);
  }
  return "";
}

// Every hypothesis well-formed, and as many as the contract promises.
Verdict valid_hypotheses(T& t, const Values&) {
  const Case& c = t.input();
  const Result& r = t.target();
  if (r.prompts.size() != c.prompts.size())
    return Verdict::fail(fmt::format("{} results for a batch of {}", r.prompts.size(), c.prompts.size()));
  const int V = c.model.vocab, eos = c.model.eos, L = c.max_new_tokens;
  const int64_t all = count_hypotheses(V, L);
  const int64_t want = std::min<int64_t>(c.beam_width, all);
  for (size_t b = 0; b < r.prompts.size(); ++b) {
    const auto& hyps = r.prompts[b].hypotheses;
    if (static_cast<int64_t>(hyps.size()) != want)
      return Verdict::fail(
          fmt::format("prompt {}: {} hypotheses, expected min(K = {}, {} possible) = {}", b, hyps.size(),
                      c.beam_width, all, want),
          {{"prompt", double(b)}, {"returned", double(hyps.size())}, {"expected", double(want)}});
    for (const Hypothesis& h : hyps) {
      const auto& tk = h.tokens;
      if (tk.empty() || static_cast<int>(tk.size()) > L)
        return Verdict::fail(
            fmt::format("prompt {}: hypothesis {} has {} tokens (1..L = {})", b, text(tk), tk.size(), L));
      for (size_t i = 0; i < tk.size(); ++i) {
        if (tk[i] < 0 || tk[i] >= V)
          return Verdict::fail(fmt::format("prompt {}: token {} outside the vocabulary", b, tk[i]));
        if (tk[i] == eos && i + 1 < tk.size())
          return Verdict::fail(
              fmt::format("prompt {}: hypothesis {} continues after EOS ({})", b, text(tk), eos),
              {{"prompt", double(b)}, {"eos_position", double(i)}, {"length", double(tk.size())}});
      }
      const bool finished = tk.back() == eos;
      if (!finished && static_cast<int>(tk.size()) != L)
        return Verdict::fail(
            fmt::format("prompt {}: unfinished hypothesis {} has {} tokens, the search must go on to "
                        "L = {} or EOS",
                        b, text(tk), tk.size(), L),
            {{"prompt", double(b)}, {"length", double(tk.size())}, {"max_new_tokens", double(L)}});
      if (h.finished != finished)
        return Verdict::fail(
            fmt::format("prompt {}: hypothesis {} reported finished = {}", b, text(tk), h.finished));
    }
  }
  return Verdict::pass();
}

// Best first by reported score; exact ties lexicographic; no duplicates.
Verdict sorted_distinct(T& t, const Values&) {
  const Result& r = t.target();
  if (std::all_of(r.prompts.begin(), r.prompts.end(), [](const Beams& b) { return b.hypotheses.size() < 2; }))
    return Verdict::discard("fewer than two hypotheses per prompt: no order to check");
  for (size_t b = 0; b < r.prompts.size(); ++b) {
    const auto& hyps = r.prompts[b].hypotheses;
    std::set<std::vector<int>> seen;
    for (size_t i = 0; i < hyps.size(); ++i) {
      if (!seen.insert(hyps[i].tokens).second)
        return Verdict::fail(fmt::format("prompt {}: hypothesis {} returned twice", b, text(hyps[i].tokens)));
      if (i == 0) continue;
      const Hypothesis &a = hyps[i - 1], &z = hyps[i];
      if (a.score < z.score)
        return Verdict::fail(
            fmt::format("prompt {}: rank {} scores {:.17g} < rank {} {:.17g}", b, i - 1, a.score, i, z.score),
            {{"prompt", double(b)}, {"rank", double(i)}});
      if (a.score == z.score && !(a.tokens < z.tokens))
        return Verdict::fail(fmt::format("prompt {}: exact tie broken against the rule: {} before {}", b,
                                         text(a.tokens), text(z.tokens)));
    }
  }
  return Verdict::pass();
}

// Reported log-prob and score equal the model's, with the penalty on the generated length.
Verdict scores_recomputed(T& t, const Values& p) {
  const Case& c = t.input();
  const TableLM model(c.model);
  const double atol = p.real("tol.atol"), rtol = p.real("tol.rtol");
  const Result& r = t.target();
  double worst = 0;  // the largest error / allowed (kErrorRatio): what --search climbs
  for (size_t b = 0; b < r.prompts.size() && b < c.prompts.size(); ++b)
    for (const Hypothesis& h : r.prompts[b].hypotheses) {
      bool in_vocab = true;
      for (int tk : h.tokens) in_vocab = in_vocab && tk >= 0 && tk < c.model.vocab;
      if (h.tokens.empty() || !in_vocab) continue;  // valid_hypotheses reports those
      const Hypothesis want = rescore(model, c.prompts[b], h.tokens, c.alpha);
      for (auto [name, got, expected] :
           {std::tuple{"log-prob", h.logprob, want.logprob}, std::tuple{"score", h.score, want.score}}) {
        if (within(got, expected, atol, rtol)) {
          worst = std::max(worst, within_ratio(got, expected, atol, rtol));
          continue;
        }
        return Verdict::fail(
            fmt::format("prompt {}: {} {} reported {:.17g}, the model gives {:.17g} (alpha {}, "
                        "{} generated tokens)",
                        b, text(h.tokens), name, got, expected, c.alpha, h.tokens.size()),
            {{"prompt", double(b)},
             {"reported", got},
             {"expected", expected},
             {"length", double(h.tokens.size())}});
      }
    }
  return Verdict::pass({{kErrorRatio, worst}});
}

// The pool trace follows the contract: each finished beam stays until K
// better ones exist, a prompt is done exactly when its pool is all finished
// (next_done), its search stops then or at L, and the result is the final
// pool.
Verdict finished_retained(T& t, const Values& p) {
  const Case& c = t.input();
  const TableLM model(c.model);
  const double tie = p.real("tie_margin");
  const Result& r = t.target();
  for (size_t b = 0; b < r.prompts.size() && b < c.prompts.size(); ++b) {
    const Beams& beams = r.prompts[b];
    if (beams.pools.empty()) return Verdict::fail(fmt::format("prompt {}: no pool trace", b));
    auto score_of = [&](const Hypothesis& h) {
      return rescore(model, c.prompts[b], h.tokens, c.alpha).score;
    };
    for (size_t step = 1; step < beams.pools.size(); ++step) {
      const auto &before = beams.pools[step - 1], &after = beams.pools[step];
      for (const Hypothesis& f : before) {
        if (!f.finished) continue;
        bool kept = false;
        for (const Hypothesis& h : after) kept = kept || h.tokens == f.tokens;
        if (kept) continue;
        const double sf = score_of(f);
        if (static_cast<int>(after.size()) < c.beam_width)
          return Verdict::fail(
              fmt::format("prompt {}: finished beam {} (score {:.6g}) left the pool at step {}, which "
                          "holds only {} of K = {}",
                          b, text(f.tokens), sf, step + 1, after.size(), c.beam_width),
              {{"prompt", double(b)}, {"step", double(step + 1)}, {"pool", double(after.size())}});
        for (const Hypothesis& h : after) {
          const double sh = score_of(h);
          if (sh < sf - margin(tie, sf))
            return Verdict::fail(
                fmt::format("prompt {}: finished beam {} (score {:.6g}) was dropped at step {} while "
                            "the worse {} (score {:.6g}) stayed",
                            b, text(f.tokens), sf, step + 1, text(h.tokens), sh),
                {{"prompt", double(b)}, {"step", double(step + 1)}, {"dropped", sf}, {"kept", sh}});
          // An exact tie in the step's own arithmetic: the scores it
          // reported, f's as it kept it and h's as it computed it, are
          // equal, so the contract's lexicographic rule alone decides, and
          // it puts f first (a margin accepts either way, and a kernel that
          // let finished beams lose ties passed every seed).
          if (h.score == f.score && f.tokens < h.tokens)
            return Verdict::fail(
                fmt::format("prompt {}: finished beam {} was dropped at step {} while {} stayed, which the "
                            "step scored exactly the same ({:.17g}): on an exact tie the lexicographically "
                            "smaller tokens come first",
                            b, text(f.tokens), step + 1, text(h.tokens), h.score),
                {{"prompt", double(b)}, {"step", double(step + 1)}, {"score", h.score}});
        }
      }
    }
    // next_done, exactly: as the step reported it (external targets), and
    // as the trace shows it (every implementation: the pool of a prompt
    // stops at the first step that leaves it all finished).
    for (size_t step = 0; step < beams.reported_done.size() && step < beams.pool_finished.size(); ++step)
      if (beams.reported_done[step] != beams.pool_finished[step])
        return Verdict::fail(
            fmt::format("prompt {}: step {} reported next_done = {}, but the prompt's new pool {}", b,
                        step + 1, int(beams.reported_done[step]),
                        beams.pool_finished[step] ? "is all finished" : "holds an unfinished beam"),
            {{"prompt", double(b)},
             {"step", double(step + 1)},
             {"next_done", double(beams.reported_done[step])}});
    for (size_t step = 0; step + 1 < beams.pools.size(); ++step)
      if (std::all_of(beams.pools[step].begin(), beams.pools[step].end(),
                      [](const Hypothesis& h) { return h.finished; }))
        return Verdict::fail(
            fmt::format("prompt {}: every beam was finished after step {}, but the search went on to step {} "
                        "(the prompt was not reported done)",
                        b, step + 1, step + 2),
            {{"prompt", double(b)}, {"step", double(step + 1)}, {"steps", double(beams.pools.size())}});
    const auto& last = beams.pools.back();
    const bool all_finished =
        std::all_of(last.begin(), last.end(), [](const Hypothesis& h) { return h.finished; });
    if (!all_finished && static_cast<int>(beams.pools.size()) < c.max_new_tokens)
      return Verdict::fail(
          fmt::format("prompt {}: the search stopped after step {} of L = {} with unfinished beams in "
                      "the pool",
                      b, beams.pools.size(), c.max_new_tokens),
          {{"prompt", double(b)}, {"steps", double(beams.pools.size())}});
    std::set<std::vector<int>> pool, result;
    for (const Hypothesis& h : last) pool.insert(h.tokens);
    for (const Hypothesis& h : beams.hypotheses) result.insert(h.tokens);
    if (pool != result) return Verdict::fail(fmt::format("prompt {}: the result is not the final pool", b));
  }
  return Verdict::pass();
}

// With K = 1 every candidate of a step has the same length, so the penalty
// cannot reorder them: the search is greedy decoding for any alpha.
Verdict greedy_when_k1(T& t, const Values& p) {
  const Case& c = t.input();
  if (c.beam_width != 1) return Verdict::discard("K != 1");
  const TableLM model(c.model);
  const double tie = p.real("tie_margin");
  const Result& r = t.target();
  for (size_t b = 0; b < c.prompts.size() && b < r.prompts.size(); ++b) {
    std::vector<int> greedy;
    Prefix state = model.start(c.prompts[b]);
    while (static_cast<int>(greedy.size()) < c.max_new_tokens) {
      const std::vector<double> lp = model.log_probs(state);
      int best = 0;
      for (int v = 1; v < model.vocab(); ++v)
        if (lp[static_cast<size_t>(v)] > lp[static_cast<size_t>(best)]) best = v;  // exact ties: smallest id
      for (int v = 0; v < model.vocab(); ++v) {
        const double gap = lp[static_cast<size_t>(best)] - lp[static_cast<size_t>(v)];
        if (v != best && gap > 0 && gap < margin(tie, lp[static_cast<size_t>(best)]))
          return Verdict::discard("near-tie in greedy decoding");
      }
      greedy.push_back(best);
      if (best == c.model.eos) break;
      state = model.push(state, best);
    }
    const auto& hyps = r.prompts[b].hypotheses;
    if (hyps.empty() || hyps[0].tokens != greedy)
      return Verdict::fail(
          fmt::format("prompt {}: K = 1 returned {}, greedy decoding gives {}", b,
                      hyps.empty() ? std::string("nothing") : text(hyps[0].tokens), text(greedy)),
          {{"prompt", double(b)}, {"greedy_length", double(greedy.size())}});
  }
  return Verdict::pass();
}

// Equals the exhaustive oracle where beam search is exact. With nothing
// pruned (K >= every possible hypothesis) the whole result equals the oracle's
// top K. With vocab 2 and alpha <= 0 the first K - 1 ranks do: only one beam
// is ever unfinished and extending never raises a score, so a hypothesis is
// lost only below K - 1 finished ones that beat it.
Verdict matches_exhaustive(T& t, const Values& p) {
  const Case& c = t.input();
  const int64_t limit = p.integer("max_hypotheses");
  const int64_t all = count_hypotheses(c.model.vocab, c.max_new_tokens, limit + 1);
  if (all > limit) return Verdict::discard("too many hypotheses to enumerate");
  const bool unpruned = c.beam_width >= all;
  if (!unpruned && !(c.model.vocab == 2 && c.alpha <= 0 && c.beam_width >= 2))
    return Verdict::discard("beam search is not exact here (pruning with vocab > 2, alpha > 0 or K = 1)");
  const double tie = p.real("tie_margin");
  if (!unpruned)
    if (auto d = near_tie_discard(t, tie, false)) return *d;
  const size_t exact = unpruned ? static_cast<size_t>(all) : static_cast<size_t>(c.beam_width) - 1;
  const TableLM model(c.model);
  const Result& r = t.target();
  for (size_t b = 0; b < c.prompts.size() && b < r.prompts.size(); ++b) {
    std::vector<Hypothesis> oracle = exhaustive(model, c.prompts[b], c.max_new_tokens, c.alpha);
    std::vector<Hypothesis> got = r.prompts[b].hypotheses;
    oracle.resize(std::min(oracle.size(), exact));
    if (!unpruned) got.resize(std::min(got.size(), exact));
    const std::string why = compare_ranked(model, c.prompts[b], c.alpha, tie, oracle, got);
    if (!why.empty())
      return Verdict::fail(fmt::format("prompt {}: {} (exhaustive search over {} hypotheses, K = {}{})", b,
                                       why, all, c.beam_width, unpruned ? "" : ", first K - 1 ranks"),
                           {{"prompt", double(b)}, {"hypotheses", double(all)}});
  }
  return Verdict::pass();
}

// Each prompt's result is what the target returns for that prompt alone.
Verdict batch_independent(T& t, const Values& p) {
  const Case& c = t.input();
  if (c.prompts.size() < 2) return Verdict::discard("batch of one");
  const double tie = p.real("tie_margin");
  if (auto d = near_tie_discard(t, tie, false)) return *d;
  const TableLM model(c.model);
  const Result& r = t.target();
  for (size_t b = 0; b < c.prompts.size() && b < r.prompts.size(); ++b) {
    Case alone = c;
    alone.prompts = {c.prompts[b]};
    const Result a = t.run_target(alone);
    if (a.prompts.size() != 1)
      return Verdict::fail(fmt::format("{} results for a batch of one", a.prompts.size()));
    const std::string why =
        compare_ranked(model, c.prompts[b], c.alpha, tie, a.prompts[0].hypotheses, r.prompts[b].hypotheses);
    if (!why.empty())
      return Verdict::fail(
          fmt::format("prompt {} of {}, in the batch against alone: {}", b, c.prompts.size(), why),
          {{"prompt", double(b)}, {"batch", double(c.prompts.size())}});
  }
  return Verdict::pass();
}

// Adding one constant per prefix to every logit changes no log-prob, so
// neither the hypotheses nor their scores may change. The shift given to a
// case without one is 1000 by default (it was 40): a constant times a
// standard normal takes a row's logits past exp's overflow (709.78) or below
// its underflow (-745.13) in about half the prefixes, where a log_softmax
// that does not take the max out first gives inf or NaN (mutant lse_no_max;
// at 40 it survived every seed). A correct log_softmax loses only the
// rounding of x - max: at most an ulp of |x| <= ~5000 (1e-12) per log-prob,
// L <= 64 of them per score, far below tol (1e-9).
Verdict logit_shift_invariant(T& t, const Values& p) {
  const Case& c = t.input();
  const double tie = p.real("tie_margin");
  if (auto d = near_tie_discard(t, tie, true)) return *d;
  Case shifted = c;
  shifted.model.shift = c.model.shift == 0 ? p.real("shift") : 0.0;
  const Result s = t.run_target(shifted);
  const Result& r = t.target();
  const TableLM model(c.model);
  const double atol = p.real("tol.atol"), rtol = p.real("tol.rtol");
  double worst = 0;  // the largest error / allowed (kErrorRatio): what --search climbs
  for (size_t b = 0; b < c.prompts.size() && b < r.prompts.size(); ++b) {
    if (b >= s.prompts.size()) return Verdict::fail("the shifted run returned fewer prompts");
    const auto &orig = r.prompts[b].hypotheses, &moved = s.prompts[b].hypotheses;
    const std::string why = compare_ranked(model, c.prompts[b], c.alpha, tie, orig, moved);
    if (!why.empty())
      return Verdict::fail(
          fmt::format("prompt {}: with logits shifted by {} per prefix, {}", b, shifted.model.shift, why),
          {{"prompt", double(b)}, {"shift", shifted.model.shift}});
    for (size_t i = 0; i < orig.size() && i < moved.size(); ++i) {
      if (orig[i].tokens != moved[i].tokens) continue;
      if (!within(moved[i].score, orig[i].score, atol, rtol))
        return Verdict::fail(
            fmt::format("prompt {}: {} scores {:.17g}, {:.17g} with shifted logits", b, text(orig[i].tokens),
                        orig[i].score, moved[i].score),
            {{"prompt", double(b)}, {"score", orig[i].score}, {"shifted_score", moved[i].score}});
      worst = std::max(worst, within_ratio(moved[i].score, orig[i].score, atol, rtol));
    }
  }
  return Verdict::pass({{kErrorRatio, worst}});
}

// The same hypotheses as the reference implementation, up to near-ties.
Verdict matches_reference(T& t, const Values& p) {
  const Case& c = t.input();
  const double tie = p.real("tie_margin");
  const TableLM model(c.model);
  const Result &r = t.target(), &ref = t.reference();
  // Exact ties first: no rounding decides them, so no near-tie elsewhere excuses them.
  for (size_t b = 0; b < c.prompts.size() && b < r.prompts.size(); ++b)
    if (const std::string why = tie_break_violation(model, c.prompts[b], r.prompts[b].hypotheses);
        !why.empty())
      return Verdict::fail(fmt::format("prompt {}: {}", b, why), {{"prompt", double(b)}});
  if (auto d = near_tie_discard(t, tie, false)) return *d;
  for (size_t b = 0; b < c.prompts.size() && b < r.prompts.size() && b < ref.prompts.size(); ++b) {
    const std::string why =
        compare_ranked(model, c.prompts[b], c.alpha, tie, ref.prompts[b].hypotheses, r.prompts[b].hypotheses);
    if (!why.empty())
      return Verdict::fail(fmt::format("prompt {}: {} (against the reference)", b, why),
                           {{"prompt", double(b)}});
  }
  return Verdict::pass();
}

}  // namespace

void register_invariants(FamilyDef<Traits>& f) {
  f.invariant({"valid_hypotheses",
               "min(K, #possible) hypotheses per prompt; EOS only last; unfinished ones have L tokens",
               {}},
              valid_hypotheses);
  f.invariant(
      {"sorted_distinct",
       "best first by score, exact ties lexicographic, no duplicates",
       {},
       [](const Values& d, const Values&) -> std::string {
         if (d.int_range("beam_width.range").hi >= 2 || d.real("beam_width.unpruned_rate") > 0) return "";
         return "K >= 2, but domain.beam_width.range is [1, 1] and unpruned_rate is 0; widen it or drop "
                "the invariant";
       }},
      sorted_distinct);
  f.invariant({"scores_recomputed",
               "reported log-probs and scores equal the model's (penalty on generated length)",
               {field::tolerance(1e-9, 1e-9, "fp64 sums of at most L log-probs")}},
              scores_recomputed);
  f.invariant(
      {"finished_retained",
       "a finished beam leaves the pool only when K better exist (on an exact tie of the step's own "
       "scores, lexicographically smaller ones); a prompt is done (next_done) exactly when its pool is all "
       "finished, and its search stops then or at L",
       {tie_field()}},
      finished_retained);
  f.invariant(
      {"greedy_when_k1",
       "K = 1 equals greedy decoding (any alpha: all candidates share a length)",
       {tie_field()},
       [](const Values& d, const Values&) -> std::string {
         if (d.int_range("beam_width.range").lo <= 1 || d.real("beam_width.one_rate") > 0) return "";
         return "K = 1, but domain.beam_width.range excludes 1 and one_rate is 0; add one or drop the "
                "invariant";
       }},
      greedy_when_k1);
  f.invariant({"matches_exhaustive",
               "equals the exhaustive top K when nothing is pruned (top K - 1 for vocab 2, alpha <= 0)",
               {tie_field(), field::integer("max_hypotheses", 20000, 1, 1e7, "enumerate at most this many")},
               [](const Values& d, const Values& p) -> std::string {
                 const int64_t fewest =
                     count_hypotheses(int(d.int_range("vocab").lo), int(d.int_range("max_new_tokens").lo));
                 if (fewest > p.integer("max_hypotheses"))
                   return fmt::format(
                       "at most max_hypotheses = {} hypotheses, but the smallest case of the "
                       "domain has {}; narrow vocab or max_new_tokens",
                       p.integer("max_hypotheses"), fewest);
                 const bool unpruned =
                     d.real("beam_width.unpruned_rate") > 0 || d.int_range("beam_width.range").hi >= fewest;
                 const bool vocab2 = d.int_range("vocab").lo == 2 &&
                                     d.int_range("beam_width.range").hi >= 2 &&
                                     (d.real_range("alpha.range").lo <= 0 || d.real("alpha.zero_rate") > 0);
                 if (unpruned || vocab2) return "";
                 return "cases where beam search is exact (nothing pruned, or vocab 2 with alpha <= 0), but "
                        "beam_width.unpruned_rate is 0 and vocab excludes 2; add one or drop the invariant";
               }},
              matches_exhaustive);
  f.invariant({"batch_independent",
               "each prompt's result equals the target's result for it alone",
               {tie_field()},
               [](const Values& d, const Values&) -> std::string {
                 if (d.int_range("batch").hi >= 2) return "";
                 return "two prompts, but domain.batch is [1, 1]; widen batch or drop the invariant";
               }},
              batch_independent);
  f.invariant({"logit_shift_invariant",
               "a per-prefix constant added to every logit changes nothing",
               {tie_field(),
                field::real("shift", 1000, 0, 1000,
                            "shift amplitude used when the case has none: the per-prefix constant is this "
                            "times a standard normal, past exp's overflow (709.78) or below its underflow "
                            "(-745.13) in about half the prefixes"),
                field::tolerance(1e-9, 1e-9, "scores before and after the shift")}},
              logit_shift_invariant);
  f.invariant({"matches_reference", "the same hypotheses as the reference implementation", {tie_field()}},
              matches_reference);
}

}  // namespace kprop::beam
