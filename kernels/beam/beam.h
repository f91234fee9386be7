// Beam search with EOS retention and a length penalty (docs/FAMILIES.md, `beam`).
//
// Contract. A batch of prompts, beam width K, at most L new tokens, length
// penalty alpha. A hypothesis is the generated continuation only (the prompt is
// never part of it): tokens ending in EOS (finished) or L tokens without EOS.
//   score = (sum of the generated tokens' log-probs, EOS included) / len^alpha
// with len the generated length including EOS; the prompt does not count.
// Log-probs are log_softmax of the model's logits at each step.
// Step t (t = 1..L) ranks the candidates: every finished beam of the pool
// (kept as is) and every one-token expansion of every unfinished beam; the pool
// becomes the K best. A beam leaves the pool only when K better candidates
// exist. The search stops when every pool member is finished (the K best are
// finished) or after step L. Result: the final pool, best first.
// Order ("better"): higher score first; exactly equal scores are broken by the
// generated tokens, lexicographically smaller first (a prefix before its
// extensions). The rule is total, so results are deterministic.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kprop/mutant.h"

namespace kprop::beam {

// A deterministic random table LM: the logits at a prefix are a pure function
// of (seed, prefix), drawn from counter-based randomness, so they never depend
// on evaluation order or on which other prefixes were evaluated.
//   logit[v] = scale * (1 + sharpen * n) * N(seed, prefix, v)
//            + [v == eos] * (eos_bias + eos_slope * n) - [masked] * mask
//            + shift * N(seed, prefix, *)
// (one non-EOS token then set to another's value + near_tie before the shift)
// with n the prefix length (prompt included). eos_bias > 0 with eos_slope < 0
// makes EOS likely early and unlikely later; sharpen > 0 makes long paths more
// confident per token; shift adds one constant per prefix to every logit (a
// correct search cannot see it); scale = 0 makes every non-EOS token tie.
struct ModelConfig {
  int vocab = 2;
  int eos = 0;
  uint64_t seed = 1;
  double scale = 1;
  double eos_bias = 0;
  double eos_slope = 0;
  double sharpen = 0;
  double shift = 0;
  // The random logits depend on the token alone, not on the prefix (the
  // generator then also draws sharpen, eos_slope and shift 0): every step's
  // log-probs are one vector, so [x, y] and [y, x] score exactly alike from
  // parents of different scores, and only the contract's lexicographic order
  // decides between them (a top-k over the flat (beam, token) index does not).
  bool prefix_free = false;
  // Masked (banned) tokens, 0: none. With mask = d > 0 about one (prefix,
  // token) pair in four, drawn like the logits, has its logit lowered by d,
  // as a serving stack bans a token with a logit of -1e4: a d past ~745 (plus
  // the logits' spread) puts the token's probability below the smallest
  // double, so log(softmax(x)) gives -inf where log_softmax gives x - lse.
  double mask = 0;
  // Near-tied siblings (0: none; vocab >= 3): of the two smallest tokens
  // other than EOS, as the model drew them (before relabel), the second's
  // logit is the first's plus near_tie: [.., a] and [.., b] then score
  // near_tie / len^alpha apart, a gap f64 resolves and float32 does not
  // when it is below about |score| * 2^-24.
  double near_tie = 0;
  // Vocabulary relabeling (empty: none): the model whose token relabel[v]
  // plays the role of this config's token v otherwise (logits, prefix
  // hashing). `eos` is given in the relabeled vocabulary. The relabel_vocab
  // transform (properties/beam/transforms.cpp) sets it.
  std::vector<int> relabel;
  bool operator==(const ModelConfig&) const = default;
};

// The model's state after a prefix: enough to produce the next logits.
struct Prefix {
  uint64_t hash = 0;
  int length = 0;
};

class TableLM {
 public:
  explicit TableLM(const ModelConfig& config);
  const ModelConfig& config() const { return config_; }
  int vocab() const { return config_.vocab; }
  Prefix start(const std::vector<int>& prompt) const;
  Prefix push(Prefix p, int token) const;
  void logits(Prefix p, double* out) const;  // vocab() values
  std::vector<double> log_probs(Prefix p) const;

 private:
  int original(int token) const {  // the token before relabeling
    return inverse_.empty() ? token : inverse_[static_cast<size_t>(token)];
  }
  ModelConfig config_;
  std::vector<int> inverse_;  // inverse of config_.relabel
};

// out[v] = x[v] - max - log(sum exp(x - max)), summed in index order.
void log_softmax(const double* x, int n, double* out);  // out may be x

struct Case {
  ModelConfig model;
  std::vector<std::vector<int>> prompts;  // the batch; each non-empty
  int beam_width = 1;                     // K
  int max_new_tokens = 1;                 // L
  double alpha = 0;                       // length penalty exponent
  bool operator==(const Case&) const = default;
};

struct Hypothesis {
  std::vector<int> tokens;  // generated tokens, EOS included
  double logprob = 0;       // sum of their log-probs
  double score = 0;         // logprob / len^alpha
  bool finished = false;    // ends with EOS
  bool operator==(const Hypothesis&) const = default;
};

// The order of the contract: higher score, then lexicographically smaller tokens.
bool better(const Hypothesis& a, const Hypothesis& b);

struct Beams {
  std::vector<Hypothesis> hypotheses;          // the result, best first
  std::vector<std::vector<Hypothesis>> pools;  // trace: pools[t] is the pool after step t + 1, best first
  // Smallest score gap between the last kept and the first dropped candidate
  // over all steps (+inf when nothing was pruned): a near-tie indicator.
  double prune_margin = std::numeric_limits<double>::infinity();
  // External targets only (properties/beam/external.cpp): for each step the
  // search ran, the next_done[b] the step reported and whether b's new pool,
  // as kprop rebuilt it, was all finished (the contract's next_done). Empty
  // for in-process implementations, whose stop shows in the trace alone.
  std::vector<uint8_t> reported_done, pool_finished;
};

struct Result {
  std::vector<Beams> prompts;  // one per prompt, in batch order
};

// Why the case breaks the contract, or "" if it is valid.
std::string validate(const Case& c);

// Number of distinct hypotheses for (vocab, L): sum_{s=1..L} (V-1)^(s-1) + (V-1)^L,
// saturating at `cap`.
int64_t count_hypotheses(int vocab, int max_new_tokens, int64_t cap = int64_t(1) << 40);

// Log-prob and score of `tokens` after `prompt`, from the model (the checker's scorer).
Hypothesis rescore(const TableLM& model, const std::vector<int>& prompt, const std::vector<int>& tokens,
                   double alpha);

// The exhaustive oracle: every hypothesis for this prompt, best first.
// Usable when count_hypotheses(vocab, L) is small.
std::vector<Hypothesis> exhaustive(const TableLM& model, const std::vector<int>& prompt, int max_new_tokens,
                                   double alpha);

// The search with each known bug as a switch (all off: the contract).
struct Semantics {
  bool retain_finished = true;          // drop_finished: false
  bool compound_penalty = false;        // penalty_compounding
  bool penalty_counts_prompt = false;   // penalty_counts_prompt
  bool expand_finished = false;         // expand_finished
  bool shared_pool = false;             // batch_pool_leak
  bool stop_at_first_eos = false;       // stop_at_first_eos
  bool ties_keep_later = false;         // ties_keep_later_token
  bool done_late = false;               // done_one_step_late
  bool finished_first_on_ties = false;  // finished_first_on_ties
  bool finished_last_on_ties = false;   // finished_lose_ties
  bool lse_first_32 = false;            // lse_first_32_lanes
  bool lse_no_max = false;              // lse_no_max
  bool log_of_softmax = false;          // log_of_softmax
  bool f32_keys = false;                // score_f32_keys
};
Result search(const Case& c, const Semantics& semantics);

// Implementations.
Result reference(const Case& c);          // one clear search per prompt
Result batched(const Case& c);            // every prompt in one flat pool, vectorized scoring
Result batched_flat_ties(const Case& c);  // mutant ties_by_flat_index: batched, exact ties by flat index

// The mutants (mutants.cpp): search() with one Semantics switch flipped.
using Mutant = kprop::Mutant<Case, Result>;
const std::vector<Mutant>& mutants();

}  // namespace kprop::beam
