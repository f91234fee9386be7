// Named tensors of beam for expression invariants (kprop/expr.h).
//
// Layout. Hypotheses are padded to the beam width K and to L tokens: slot
// (b, i) is prompt b's i-th best hypothesis, tokens padded with -1, and a
// slot the result leaves empty has valid = false, length 0, finished = false
// and log-prob = score = -inf. The pool trace is [B, L, K]: step t (0-based)
// holds the pool after search step t + 1; once a prompt's search stopped
// (`steps[b]` steps) the later steps repeat its final pool, which is what the
// pool then is.
#include <algorithm>
#include <cmath>
#include <limits>

#include "properties/beam/family.h"

namespace kprop::beam {

expr::TensorInfos Traits::tensor_infos() {
  expr::TensorInfos t = expr::tensor_table(R"(
B               []   int   batch size (prompts)
K               []   int   beam width
L               []   int   most new tokens
V               []   int   vocabulary size
eos             []   int   the EOS token
alpha           []   real  length penalty exponent: score = log-prob / length^alpha
possible        []   int   distinct hypotheses for (V, L), saturating at 2^40 (count_hypotheses): each prompt
                           gets min(K, possible)
prompt_lengths  [B]  int   tokens of each prompt
vocab_ids       [V]  int   0, 1, ..., V-1
)");
  const expr::TensorInfos outputs = expr::tensor_table(R"(
tokens          [B, K, L]     int   generated tokens of result hypothesis (b, i), -1 padded
valid           [B, K]        bool  result slot (b, i) holds a hypothesis
lengths         [B, K]        int   generated length incl. EOS (0: empty slot)
finished        [B, K]        bool  the hypothesis is reported finished
logprobs        [B, K]        real  reported log-prob (-inf: empty slot)
scores          [B, K]        real  reported score (-inf: empty slot)
model_logprobs  [B, K]        real  the model's log-prob of the reported tokens, recomputed by the checker
                                    (rescore; -inf: empty slot, nan: tokens outside the vocabulary)
model_scores    [B, K]        real  the model's score of the reported tokens (rescore)
steps           [B]           int   search steps run (pools in the trace)
pool_tokens     [B, L, K, L]  int   tokens of pool member i after step t + 1, -1 padded (the final pool
                                    repeated after the stop)
pool_valid      [B, L, K]     bool  pool slot holds a beam
pool_scores     [B, L, K]     real  reported score of the pool member (-inf: empty)
pool_lengths    [B, L, K]     int   generated length of the pool member
pool_finished   [B, L, K]     bool  the pool member is finished
prune_margin    [B]           real  smallest score gap between the last kept and first dropped candidate over
                                    the steps (+inf: nothing pruned)
)");
  expr::add_per_implementation(t, {{"target", ""}, {"reference", ""}}, outputs);
  return t;
}

namespace {

using expr::DType;
using expr::Tensor;
using expr::TensorMap;

constexpr double kNone = -std::numeric_limits<double>::infinity();

void put_case(const Case& c, TensorMap& out) {
  const auto B = static_cast<int64_t>(c.prompts.size());
  out.put("B", Tensor::scalar(double(B), DType::integer));
  out.put("K", Tensor::scalar(c.beam_width, DType::integer));
  out.put("L", Tensor::scalar(c.max_new_tokens, DType::integer));
  out.put("V", Tensor::scalar(c.model.vocab, DType::integer));
  out.put("eos", Tensor::scalar(c.model.eos, DType::integer));
  out.put("alpha", Tensor::scalar(c.alpha));
  out.put("possible",
          Tensor::scalar(double(count_hypotheses(c.model.vocab, c.max_new_tokens)), DType::integer));
  if (out.wanted("prompt_lengths")) {
    std::vector<double> n;
    for (const auto& p : c.prompts) n.push_back(double(p.size()));
    out.put("prompt_lengths", Tensor::of({B}, std::move(n), DType::integer));
  }
  if (out.wanted("vocab_ids")) {
    std::vector<double> ids(static_cast<size_t>(c.model.vocab));
    for (size_t v = 0; v < ids.size(); ++v) ids[v] = double(v);
    out.put("vocab_ids", Tensor::of({c.model.vocab}, std::move(ids), DType::integer));
  }
}

// Hypotheses padded to `slots` x L. False when one does not fit (an external
// kernel's bad report): the tensors are then left unpublished.
struct Padded {
  std::vector<double> tokens, valid, lengths, finished, logprobs, scores;
  bool fill(const std::vector<Hypothesis>& hyps, int slots, int L) {
    if (static_cast<int>(hyps.size()) > slots) return false;
    for (int i = 0; i < slots; ++i) {
      const Hypothesis* h = i < static_cast<int>(hyps.size()) ? &hyps[size_t(i)] : nullptr;
      if (h && static_cast<int>(h->tokens.size()) > L) return false;
      for (int j = 0; j < L; ++j)
        tokens.push_back(h && j < int(h->tokens.size()) ? h->tokens[size_t(j)] : -1);
      valid.push_back(h != nullptr);
      lengths.push_back(h ? double(h->tokens.size()) : 0);
      finished.push_back(h && h->finished);
      logprobs.push_back(h ? h->logprob : kNone);
      scores.push_back(h ? h->score : kNone);
    }
    return true;
  }
};

void put_result(const Case& c, const std::string& who, const Result& r, TensorMap& out) {
  const auto B = static_cast<int64_t>(c.prompts.size());
  const int K = c.beam_width, L = c.max_new_tokens;
  auto want = [&](const char* name) { return out.wanted(who + "." + name); };
  auto put = [&](const char* name, std::vector<int64_t> shape, std::vector<double> data, DType dt) {
    out.put(who + "." + name, Tensor::of(std::move(shape), std::move(data), dt));
  };
  if (r.prompts.size() != c.prompts.size()) return;
  Padded res;
  bool ok = true;
  for (const Beams& b : r.prompts) ok = ok && res.fill(b.hypotheses, K, L);
  if (ok) {
    put("tokens", {B, K, L}, std::move(res.tokens), DType::integer);
    put("valid", {B, K}, std::move(res.valid), DType::boolean);
    put("lengths", {B, K}, std::move(res.lengths), DType::integer);
    put("finished", {B, K}, std::move(res.finished), DType::boolean);
    put("logprobs", {B, K}, std::move(res.logprobs), DType::real);
    put("scores", {B, K}, std::move(res.scores), DType::real);
    if (want("model_logprobs") || want("model_scores")) {
      const TableLM model(c.model);
      std::vector<double> lp, sc;
      for (size_t b = 0; b < r.prompts.size(); ++b)
        for (int i = 0; i < K; ++i) {
          const auto& hyps = r.prompts[b].hypotheses;
          if (i >= static_cast<int>(hyps.size())) {
            lp.push_back(kNone), sc.push_back(kNone);
            continue;
          }
          const auto& tk = hyps[size_t(i)].tokens;
          const bool in_vocab = !tk.empty() && std::all_of(tk.begin(), tk.end(), [&](int x) {
            return x >= 0 && x < c.model.vocab;
          });
          if (!in_vocab) {
            lp.push_back(std::nan("")), sc.push_back(std::nan(""));
            continue;
          }
          const Hypothesis h = rescore(model, c.prompts[b], tk, c.alpha);
          lp.push_back(h.logprob), sc.push_back(h.score);
        }
      put("model_logprobs", {B, K}, std::move(lp), DType::real);
      put("model_scores", {B, K}, std::move(sc), DType::real);
    }
  }
  std::vector<double> steps, margin;
  for (const Beams& b : r.prompts) steps.push_back(double(b.pools.size())), margin.push_back(b.prune_margin);
  if (want("steps")) put("steps", {B}, std::move(steps), DType::integer);
  if (want("prune_margin")) put("prune_margin", {B}, std::move(margin), DType::real);
  if (want("pool_tokens") || want("pool_valid") || want("pool_scores") || want("pool_lengths") ||
      want("pool_finished")) {
    Padded pool;
    bool fits = true;
    for (const Beams& b : r.prompts) {
      fits = fits && !b.pools.empty() && static_cast<int>(b.pools.size()) <= L;
      for (int t = 0; fits && t < L; ++t)
        fits = pool.fill(b.pools[std::min(size_t(t), b.pools.size() - 1)], K, L);
    }
    if (fits) {
      put("pool_tokens", {B, L, K, L}, std::move(pool.tokens), DType::integer);
      put("pool_valid", {B, L, K}, std::move(pool.valid), DType::boolean);
      put("pool_scores", {B, L, K}, std::move(pool.scores), DType::real);
      put("pool_lengths", {B, L, K}, std::move(pool.lengths), DType::integer);
      put("pool_finished", {B, L, K}, std::move(pool.finished), DType::boolean);
    }
  }
}

}  // namespace

void Traits::tensors(const Case& c, const Result* target, const Result* reference, TensorMap& out) {
  put_case(c, out);
  if (target) put_result(c, "target", *target, out);
  if (reference) put_result(c, "reference", *reference, out);
}

}  // namespace kprop::beam
