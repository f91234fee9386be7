// The beam family's shrinker.
#include <algorithm>
#include <cmath>
#include <vector>

#include "properties/beam/family.h"

namespace kprop::beam {

namespace {

// How readable a real is: 0, 1, -1, integers, halves, tenths, anything.
int plainness(double x) {
  if (x == 0) return 0;
  if (x == 1) return 1;
  if (x == -1) return 2;
  if (x == std::round(x)) return 3;
  if (2 * x == std::round(2 * x)) return 4;
  if (10 * x == std::round(10 * x)) return 5;
  return 6;
}

// Plainer values for x, plainest first; each strictly plainer (or as plain
// and smaller), so repeated shrinking terminates.
std::vector<double> plainer(double x) {
  std::vector<double> out;
  for (double y : {0.0, 1.0, -1.0, std::round(x), std::round(2 * x) / 2, std::round(10 * x) / 10}) {
    const bool simpler =
        plainness(y) < plainness(x) || (plainness(y) == plainness(x) && std::fabs(y) < std::fabs(x));
    if (simpler && std::find(out.begin(), out.end(), y) == out.end()) out.push_back(y);
  }
  return out;
}

Case with_vocab(Case c, int vocab) {
  c.model.vocab = vocab;
  c.model.eos = std::min(c.model.eos, vocab - 1);
  for (auto& p : c.prompts)
    for (int& t : p) t = std::min(t, vocab - 1);
  return c;
}

}  // namespace

// One shrink step, boldest first: fewer prompts, fewer steps, narrower beams,
// smaller vocabularies, shorter prompts, plainer alpha and model parameters,
// smaller seeds, smaller token ids. Candidates that break the contract are skipped.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values&) {
  std::vector<Case> out;
  const int B = static_cast<int>(c.prompts.size());
  if (B > 1) {
    Case s = c;
    s.prompts.resize(1);
    out.push_back(s);
    for (int b = 0; b < B; ++b) {
      Case t = c;
      t.prompts.erase(t.prompts.begin() + b);
      out.push_back(std::move(t));
    }
  }
  for (int L : {1, c.max_new_tokens / 2, c.max_new_tokens - 1})
    if (L >= 1 && L < c.max_new_tokens) {
      Case s = c;
      s.max_new_tokens = L;
      out.push_back(std::move(s));
    }
  for (int K : {1, 2, 3, c.beam_width / 2, c.beam_width - 1})
    if (K >= 1 && K < c.beam_width) {
      Case s = c;
      s.beam_width = K;
      out.push_back(std::move(s));
    }
  for (int V : {2, 3, c.model.vocab / 2, c.model.vocab - 1})
    if (V >= 2 && V < c.model.vocab) out.push_back(with_vocab(c, V));
  for (int b = 0; b < B; ++b) {
    const auto& p = c.prompts[static_cast<size_t>(b)];
    if (p.size() > 2) {
      Case s = c;
      s.prompts[static_cast<size_t>(b)].erase(
          s.prompts[static_cast<size_t>(b)].begin(),
          s.prompts[static_cast<size_t>(b)].begin() + static_cast<long>(p.size() / 2));
      out.push_back(std::move(s));
    }
    if (p.size() > 1)
      for (size_t i = 0; i < p.size(); ++i) {
        Case s = c;
        s.prompts[static_cast<size_t>(b)].erase(s.prompts[static_cast<size_t>(b)].begin() +
                                                static_cast<long>(i));
        out.push_back(std::move(s));
      }
  }
  for (double a : plainer(c.alpha)) {
    Case s = c;
    s.alpha = a;
    out.push_back(std::move(s));
  }
  for (double ModelConfig::*param :
       {&ModelConfig::near_tie, &ModelConfig::mask, &ModelConfig::shift, &ModelConfig::sharpen,
        &ModelConfig::eos_slope, &ModelConfig::eos_bias, &ModelConfig::scale})
    for (double v : plainer(c.model.*param)) {
      Case s = c;
      s.model.*param = v;
      out.push_back(std::move(s));
    }
  for (uint64_t seed = 1; seed < c.model.seed && seed <= 8; ++seed) {
    Case s = c;
    s.model.seed = seed;
    out.push_back(std::move(s));
  }
  if (c.model.eos > 0) {
    Case s = c;
    s.model.eos = 0;
    out.push_back(std::move(s));
  }
  for (int b = 0; b < B; ++b)
    for (size_t i = 0; i < c.prompts[static_cast<size_t>(b)].size(); ++i)
      for (int t : {0, c.prompts[static_cast<size_t>(b)][i] - 1})
        if (t >= 0 && t < c.prompts[static_cast<size_t>(b)][i]) {
          Case s = c;
          s.prompts[static_cast<size_t>(b)][i] = t;
          out.push_back(std::move(s));
        }
  return rc::seq::filter(rc::seq::fromContainer(std::move(out)),
                         [c](const Case& s) { return !(s == c) && validate(s).empty(); });
}

}  // namespace kprop::beam
