// The reference beam search (one pool per prompt, written for clarity). The
// mutants (mutants.cpp) are the same search with one Semantics switch flipped.
#include <algorithm>
#include <cmath>

#include "kernels/beam/beam.h"

namespace kprop::beam {
namespace {

struct Entry {
  int prompt;
  Hypothesis h;
  Prefix state;  // the model after prompt ++ h.tokens
};

// lse_first_32_lanes: a warp-per-row log_softmax with one logit per lane
// and no loop past lane 32: the max spans the row, the normaliser sums only
// its first 32 exponentials (right for vocabularies of at most 32).
std::vector<double> log_probs_first_32(const TableLM& model, Prefix p) {
  const int n = model.vocab();
  std::vector<double> x(static_cast<size_t>(n));
  model.logits(p, x.data());
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (int i = 0; i < std::min(n, 32); ++i) sum += std::exp(x[static_cast<size_t>(i)] - m);
  const double log_sum = std::log(sum);
  for (double& v : x) v = v - m - log_sum;
  return x;
}

// lse_no_max: log_softmax as x - log(sum(exp(x))), without the max taken
// out first: exp overflows to inf once a logit passes ~709.78 (every
// log-prob of the row is then -inf) and underflows to 0 once every logit of
// the row is below ~-745.13 (log(0) = -inf: every log-prob +inf). Exact
// enough for the logits of a few units the spec's cases had.
std::vector<double> log_probs_no_max(const TableLM& model, Prefix p) {
  std::vector<double> x(static_cast<size_t>(model.vocab()));
  model.logits(p, x.data());
  double sum = 0;
  for (double v : x) sum += std::exp(v);
  const double log_sum = std::log(sum);
  for (double& v : x) v -= log_sum;
  return x;
}

// log_of_softmax: log(softmax(x)), the probabilities first: right where
// they are normal doubles, -inf where exp(x - max) underflows to 0 (a token
// more than ~745 below the row's max, as a banned token's -1e4 is).
std::vector<double> log_probs_of_softmax(const TableLM& model, Prefix p) {
  std::vector<double> x(static_cast<size_t>(model.vocab()));
  model.logits(p, x.data());
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double& v : x) sum += v = std::exp(v - m);
  for (double& v : x) v = std::log(v / sum);
  return x;
}

std::vector<double> log_probs(const TableLM& model, Prefix p, const Semantics& s) {
  if (s.lse_first_32) return log_probs_first_32(model, p);
  if (s.lse_no_max) return log_probs_no_max(model, p);
  if (s.log_of_softmax) return log_probs_of_softmax(model, p);
  return model.log_probs(p);
}

bool entry_better(const Entry& a, const Entry& b) {
  return better(a.h, b.h);
}

// score_f32_keys: the order of sort keys holding float32(score) (a GPU
// top-k's keys): scores float32 cannot tell apart fall to the token order.
bool f32_order(const Hypothesis& a, const Hypothesis& b) {
  const float x = static_cast<float>(a.score), y = static_cast<float>(b.score);
  return x != y ? x > y : a.tokens < b.tokens;
}

bool f32_better(const Entry& a, const Entry& b) {
  return f32_order(a.h, b.h);
}

// Runs one pool of width `width` holding the beams of the prompts in `group`.
void run_pool(const TableLM& model, const Case& c, const Semantics& s, const std::vector<int>& group,
              int width, Result& out) {
  const int eos = model.config().eos;
  auto expand = [&](const Entry& e, std::vector<Entry>& into) {
    const std::vector<double> lp = log_probs(model, e.state, s);
    const int len = static_cast<int>(e.h.tokens.size()) + 1;
    const int counted =
        len +
        (s.penalty_counts_prompt ? static_cast<int>(c.prompts[static_cast<size_t>(e.prompt)].size()) : 0);
    const double denom = std::pow(static_cast<double>(counted), c.alpha);
    for (int v = 0; v < model.vocab(); ++v) {
      Entry child{e.prompt, {}, model.push(e.state, v)};
      child.h.tokens.reserve(e.h.tokens.size() + 1);  // one allocation, not a copy and a regrowth
      child.h.tokens = e.h.tokens;
      child.h.tokens.push_back(v);
      child.h.logprob = e.h.logprob + lp[static_cast<size_t>(v)];
      child.h.score = (s.compound_penalty ? e.h.score + lp[static_cast<size_t>(v)] : child.h.logprob) / denom;
      child.h.finished = v == eos;
      into.push_back(std::move(child));
    }
  };

  std::vector<Entry> pool;
  for (int b : group) pool.push_back({b, {}, model.start(c.prompts[static_cast<size_t>(b)])});  // empty roots
  bool was_all_finished = false;
  for (int step = 1; step <= c.max_new_tokens; ++step) {
    std::vector<Entry> candidates;
    candidates.reserve(pool.size() * static_cast<size_t>(model.vocab()));
    for (const Entry& e : pool) {
      if (!e.h.finished || s.expand_finished)
        expand(e, candidates);
      else if (s.retain_finished)
        candidates.push_back(e);  // finished beams stay and compete as they are
    }
    // The best width + 1 in order (one past the pool for the prune margin):
    // `better` is a total order on one prompt's beams, so the same as sorting all.
    const size_t ranked = std::min(candidates.size(), static_cast<size_t>(width) + 1);
    // A finished beam kept from an earlier step is shorter than this step's
    // expansions (step tokens each).
    auto kept = [step](const Entry& e) { return e.h.finished && static_cast<int>(e.h.tokens.size()) < step; };
    if (s.finished_first_on_ties)  // equal scores: a kept finished beam before an expansion
      std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(ranked), candidates.end(),
                        [&](const Entry& a, const Entry& b) {
                          if (a.h.score != b.h.score) return a.h.score > b.h.score;
                          if (kept(a) != kept(b)) return kept(a);
                          return a.h.tokens < b.h.tokens;
                        });
    else if (s.finished_last_on_ties)  // equal scores: a kept finished beam after an expansion
      std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(ranked), candidates.end(),
                        [&](const Entry& a, const Entry& b) {
                          if (a.h.score != b.h.score) return a.h.score > b.h.score;
                          if (kept(a) != kept(b)) return kept(b);
                          return a.h.tokens < b.h.tokens;
                        });
    else if (s.ties_keep_later)  // equal scores: the later token sequence first
      std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(ranked), candidates.end(),
                        [](const Entry& a, const Entry& b) {
                          return a.h.score != b.h.score ? a.h.score > b.h.score : b.h.tokens < a.h.tokens;
                        });
    else
      std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(ranked), candidates.end(),
                        s.f32_keys ? f32_better : entry_better);
    if (static_cast<int>(candidates.size()) > width) {
      const double gap =
          candidates[static_cast<size_t>(width) - 1].h.score - candidates[static_cast<size_t>(width)].h.score;
      for (int b : group) {
        double& m = out.prompts[static_cast<size_t>(b)].prune_margin;
        m = std::min(m, gap);
      }
      candidates.resize(static_cast<size_t>(width));
    }
    // finished_lose_ties sorts the beams it kept by the contract's order:
    // only which beams survive shows its bug.
    if (s.finished_last_on_ties) std::sort(candidates.begin(), candidates.end(), entry_better);
    pool = std::move(candidates);
    for (int b : group) out.prompts[static_cast<size_t>(b)].pools.emplace_back();
    for (const Entry& e : pool) out.prompts[static_cast<size_t>(e.prompt)].pools.back().push_back(e.h);
    const bool all_finished =
        std::all_of(pool.begin(), pool.end(), [](const Entry& e) { return e.h.finished; });
    const bool any_finished =
        std::any_of(pool.begin(), pool.end(), [](const Entry& e) { return e.h.finished; });
    // done_late: the pool must already have been all finished after the
    // step before (a done flag computed from the pool before the step).
    if ((all_finished && (!s.done_late || was_all_finished)) || (s.stop_at_first_eos && any_finished)) break;
    was_all_finished = all_finished;
  }
  for (const Entry& e : pool) out.prompts[static_cast<size_t>(e.prompt)].hypotheses.push_back(e.h);
  for (int b : group) {
    auto& hyps = out.prompts[static_cast<size_t>(b)].hypotheses;
    // finished_first_on_ties returns its last pool in the order it ranked it
    // (its one sort key), a kept finished beam before an expansion it ties.
    // score_f32_keys returns it in its float32 key order.
    if (s.f32_keys)
      std::sort(hyps.begin(), hyps.end(), f32_order);
    else if (!s.finished_first_on_ties)
      std::sort(hyps.begin(), hyps.end(), better);
    if (static_cast<int>(hyps.size()) > c.beam_width) hyps.resize(static_cast<size_t>(c.beam_width));
  }
}

}  // namespace

Result search(const Case& c, const Semantics& s) {
  const TableLM model(c.model);
  const int batch = static_cast<int>(c.prompts.size());
  Result out;
  out.prompts.resize(static_cast<size_t>(batch));
  if (s.shared_pool) {
    // The bug: one top-(K x batch) over every prompt's candidates.
    std::vector<int> all;
    for (int b = 0; b < batch; ++b) all.push_back(b);
    run_pool(model, c, s, all, c.beam_width * batch, out);
  } else {
    for (int b = 0; b < batch; ++b) run_pool(model, c, s, {b}, c.beam_width, out);
  }
  return out;
}

Result reference(const Case& c) {
  return search(c, Semantics{});
}

}  // namespace kprop::beam
