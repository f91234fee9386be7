// The table LM, the scorer and the exhaustive oracle.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/beam/beam.h"
#include "kprop/rng.h"

namespace kprop::beam {
namespace {
// The shift's draw lives at an index no token uses.
constexpr uint64_t kShiftIndex = uint64_t(1) << 40;
// Whether a (prefix, token) is masked: uniform draws from index kMaskIndex +
// token on, which no normal draw uses (those read indices 2i and 2i + 1, i
// a token or kShiftIndex).
constexpr uint64_t kMaskIndex = uint64_t(3) << 42;
// The fraction of masked (prefix, token) pairs of a model with mask != 0.
constexpr double kMaskedFraction = 0.25;
}  // namespace

TableLM::TableLM(const ModelConfig& config) : config_(config) {
  inverse_.resize(config.relabel.size());
  for (size_t v = 0; v < config.relabel.size(); ++v)
    inverse_[static_cast<size_t>(config.relabel[v])] = static_cast<int>(v);
}

Prefix TableLM::start(const std::vector<int>& prompt) const {
  Prefix p{rng::mix(config_.seed ^ 0x6265616d5f6c6dULL), 0};
  for (int t : prompt) p = push(p, t);
  return p;
}

Prefix TableLM::push(Prefix p, int token) const {
  return {rng::mix(p.hash ^ (static_cast<uint64_t>(original(token)) + 1) * 0x9e3779b97f4a7c15ULL),
          p.length + 1};
}

void TableLM::logits(Prefix p, double* out) const {
  const ModelConfig& m = config_;
  const double spread = m.scale * (1 + m.sharpen * p.length);
  const double shift = m.shift == 0 ? 0 : m.shift * rng::normal(m.seed, p.hash, kShiftIndex);
  const uint64_t stream = m.prefix_free ? 0 : p.hash;
  for (int v = 0; v < m.vocab; ++v) {
    const auto drawn = static_cast<uint64_t>(original(v));
    double x = spread == 0 ? 0 : spread * rng::normal(m.seed, stream, drawn);
    if (v == m.eos) x += m.eos_bias + m.eos_slope * p.length;
    if (m.mask != 0 && rng::uniform(m.seed, stream, kMaskIndex + drawn) < kMaskedFraction) x -= m.mask;
    out[v] = x;
  }
  if (m.near_tie != 0 && m.vocab >= 3) {
    // The two smallest tokens as the model drew them (before relabel) that
    // are not EOS: its bias stays on EOS alone, so the near-tie changes one
    // token's logit and no stopping behaviour.
    const int eos = original(m.eos), a = eos == 0 ? 1 : 0, b = eos <= 1 ? 2 : 1;
    const auto at = [&](int token) {
      return static_cast<size_t>(m.relabel.empty() ? token : m.relabel[size_t(token)]);
    };
    out[at(b)] = out[at(a)] + m.near_tie;
  }
  for (int v = 0; v < m.vocab; ++v) out[v] += shift;  // x + shift, as one sum: the bits of before
}

std::vector<double> TableLM::log_probs(Prefix p) const {
  std::vector<double> x(static_cast<size_t>(vocab()));
  logits(p, x.data());
  log_softmax(x.data(), vocab(), x.data());  // in place: out[i] reads only x[i] once m and the sum are known
  return x;
}

void log_softmax(const double* x, int n, double* out) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - m);
  const double log_sum = std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = x[i] - m - log_sum;
}

bool better(const Hypothesis& a, const Hypothesis& b) {
  if (a.score != b.score) return a.score > b.score;
  return a.tokens < b.tokens;
}

std::string validate(const Case& c) {
  const ModelConfig& m = c.model;
  if (m.vocab < 2) return fmt::format("vocab {} < 2", m.vocab);
  if (m.eos < 0 || m.eos >= m.vocab)
    return fmt::format("eos {} outside the vocabulary [0, {})", m.eos, m.vocab);
  for (double x : {m.scale, m.eos_bias, m.eos_slope, m.sharpen, m.shift, m.mask, m.near_tie, c.alpha})
    if (!std::isfinite(x)) return "model parameters and alpha must be finite";
  if (m.scale < 0 || m.sharpen < 0 || m.mask < 0) return "scale, sharpen and mask must be >= 0";
  if (!m.relabel.empty()) {
    std::vector<bool> seen(static_cast<size_t>(m.vocab));
    bool ok = static_cast<int>(m.relabel.size()) == m.vocab;
    for (size_t v = 0; ok && v < m.relabel.size(); ++v) {
      const int r = m.relabel[v];
      ok = r >= 0 && r < m.vocab && !seen[static_cast<size_t>(r)];
      if (ok) seen[static_cast<size_t>(r)] = true;
    }
    if (!ok) return "model.relabel must be a permutation of the vocabulary";
  }
  if (c.prompts.empty()) return "empty batch";
  for (size_t b = 0; b < c.prompts.size(); ++b) {
    if (c.prompts[b].empty()) return fmt::format("prompt {} is empty", b);
    for (int t : c.prompts[b])
      if (t < 0 || t >= m.vocab) return fmt::format("prompt {} has token {} outside the vocabulary", b, t);
  }
  if (c.beam_width < 1) return "beam_width must be >= 1";
  if (c.max_new_tokens < 1) return "max_new_tokens must be >= 1";
  return "";
}

int64_t count_hypotheses(int vocab, int max_new_tokens, int64_t cap) {
  // Finished ones of every length s (EOS last, V-1 choices before it), plus unfinished at L.
  int64_t total = 0, unfinished = 1;  // (V-1)^(s-1)
  for (int s = 1; s <= max_new_tokens; ++s) {
    total += unfinished;
    if (total >= cap) return cap;
    unfinished = std::min<int64_t>(cap, unfinished * (vocab - 1));
  }
  return std::min(cap, total + unfinished);
}

Hypothesis rescore(const TableLM& model, const std::vector<int>& prompt, const std::vector<int>& tokens,
                   double alpha) {
  Hypothesis h{tokens, 0, 0, !tokens.empty() && tokens.back() == model.config().eos};
  Prefix p = model.start(prompt);
  for (int t : tokens) {
    h.logprob += model.log_probs(p)[static_cast<size_t>(t)];
    p = model.push(p, t);
  }
  h.score = h.logprob / std::pow(static_cast<double>(tokens.size()), alpha);
  return h;
}

std::vector<Hypothesis> exhaustive(const TableLM& model, const std::vector<int>& prompt, int max_new_tokens,
                                   double alpha) {
  std::vector<Hypothesis> all;
  const int eos = model.config().eos;
  // Depth-first over unfinished prefixes; every child is a hypothesis if it
  // ends in EOS or reaches L tokens.
  struct Frame {
    Prefix state;
    std::vector<int> tokens;
    double logprob;
  };
  std::vector<Frame> stack{{model.start(prompt), {}, 0.0}};
  while (!stack.empty()) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    const std::vector<double> lp = model.log_probs(f.state);
    for (int v = 0; v < model.vocab(); ++v) {
      std::vector<int> tokens = f.tokens;
      tokens.push_back(v);
      const double logprob = f.logprob + lp[static_cast<size_t>(v)];
      const int len = static_cast<int>(tokens.size());
      if (v == eos || len == max_new_tokens) {
        const double score = logprob / std::pow(static_cast<double>(len), alpha);
        all.push_back({std::move(tokens), logprob, score, v == eos});
      } else {
        stack.push_back({model.push(f.state, v), std::move(tokens), logprob});
      }
    }
  }
  std::sort(all.begin(), all.end(), better);
  return all;
}

}  // namespace kprop::beam
