// The target model for speculative decoding: a tiny deterministic
// transformer LM in double precision. Weights are a pure function of
// (seed, tensor, row, column), so a model is defined by its config alone and
// shrinking a dimension keeps the surviving weights unchanged.
//
// Architecture (pre-norm, no biases): token embedding + learned position
// embedding of the position id; per layer RMS-norm -> multi-head attention ->
// residual, RMS-norm -> tanh MLP (hidden 2d) -> residual; final RMS-norm and
// an untied output projection scaled so argmax margins are rarely tiny.
// With `tied` > 0, tokens 1..tied share token 0's output projection row: their
// logits are then bit-identical in every logits row of every computation of
// the model (the same dot product of the same final hidden state, in the same
// order), so whenever that group holds the largest logit the argmax is an
// exact tie, decided by the lowest index (token 0).
// With `near_tie` = r != 0 (and tied 0), token 1's logit is token 0's times
// (1 + r), rounded once, in every logits row: a near-tie whose relative gap
// |r| may sit far below f32's resolution (2^-24) while the f64 values differ
// (|r| >= 2^-50, four ulps of 1: fl(l0 (1 + r)) != l0 for every normal
// l0 != 0, as |l0 r| is at least four ulps of l0 and the product rounds by at
// most half of one). Which of the two is larger is the sign of l0 r, the
// same in every computation of a row whose l0 keeps its sign, so
// argmax(model, ·) counts |l0| as the pair's margin, not their gap: a kernel
// that argmaxes the f64 logits in a lower precision is judged there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace kprop::dflash {

struct ModelConfig {
  int vocab = 2;
  int d_model = 4;
  int layers = 1;
  int heads = 1;  // divides d_model
  uint64_t seed = 1;
  int tied = 0;  // tokens 1..tied copy token 0's output row (0: none; below vocab)
  // Token 1's logit is token 0's times (1 + near_tie) (0: none; not with tied;
  // 1 + near_tie is exact in double and 2^-50 <= |near_tie| <= 1/2).
  double near_tie = 0;
  bool operator==(const ModelConfig&) const = default;
};

using Logits = std::vector<double>;

class TinyLM {
 public:
  explicit TinyLM(const ModelConfig& config);
  // The model of `config`, built once for the last few configs asked for
  // (a case's checks build the same model several times, and its weights
  // cost more than a forward pass; thread-safe). Equal to TinyLM(config).
  static std::shared_ptr<const TinyLM> shared(const ModelConfig& config);
  const ModelConfig& config() const { return config_; }
  // Whether tokens a and b have the same output projection row (a == b, or
  // both in the tied group 0..tied): their logits are then always equal.
  bool same_output_row(int a, int b) const { return a == b || (a <= config_.tied && b <= config_.tied); }

  // Keys and values of every committed position, per layer, plus the logits
  // of the last committed position (the next-token prediction).
  struct Cache {
    std::vector<std::vector<double>> keys, values;  // [layer][position * d_model + k]
    int length = 0;
    Logits last_logits;
  };
  Cache empty_cache() const;

  // Runs a block of new tokens after everything in `cache`: block token i
  // attends to every cached position and to block tokens j with
  // visible(i, j). Returns one logits row per block token. When `commit` is
  // set, the block's keys/values are appended to the cache (the block must
  // then be causal) and last_logits updated.
  std::vector<Logits> forward_block(Cache& cache, std::span<const int> tokens, std::span<const int> positions,
                                    const std::function<bool(int, int)>& visible, bool commit) const;

  // Appends one token at `position` (causal decoding step).
  void append(Cache& cache, int token, int position) const;

 private:
  double weight(int tensor, int layer, int row, int col, double scale) const;
  // forward_block, with the logits of every block token in *rows, or (rows
  // null, commit set) only the last one's, in cache.last_logits.
  void run_block(Cache& cache, std::span<const int> tokens, std::span<const int> positions,
                 const std::function<bool(int, int)>& visible, bool commit, std::vector<Logits>* rows) const;
  // Adds the position embedding of `position` to x[0..d).
  void add_position(int position, double* x) const;
  ModelConfig config_;
  int head_dim_;
  // Materialised weights, row-major.
  std::vector<double> token_embedding_, output_;  // [vocab][d]
  struct Layer {
    std::vector<double> wq, wk, wv, wo;  // [d][d]
    std::vector<double> w1;              // [2d][d]
    std::vector<double> w2;              // [d][2d]
  };
  std::vector<Layer> layers_;
  // Position embedding rows [position][d] of positions 0 .. kCachedPositions-1,
  // computed on first use (a reference step re-runs its whole context, and
  // each element is a normal draw: a log and a cos) and shared by copies of
  // the model, since they are a function of its config.
  static constexpr int kCachedPositions = 1 << 14;
  struct PositionRows {
    std::mutex mutex;
    std::vector<double> rows;
  };
  std::shared_ptr<PositionRows> positions_ = std::make_shared<PositionRows>();
};

// Index of the largest logit (lowest index on exact ties) and the gap to the
// runner-up (infinity for a one-token vocabulary).
struct Argmax {
  int index = 0;
  double margin = 0;
};
Argmax argmax(const Logits& logits);
// argmax of a logits row of `model`, with the margin taken over the tokens
// whose output row differs from the winner's: the gap rounding would have to
// close to change the decision. Tokens sharing the winner's row (its tied
// group) equal it exactly in every computation, so that exact tie is decided
// by the lowest index and is no near-tie. An exact tie with any other token
// (a coincidence of distinct rows) leaves margin 0. A winner of a near_tie
// model's pair (tokens 0 and 1) has the margin min(gap to the other tokens,
// |L[0]|): the pair's order is the sign of L[0] near_tie in every
// computation, and only an error of |L[0]| could flip it.
Argmax argmax(const TinyLM& model, const Logits& logits);

}  // namespace kprop::dflash
