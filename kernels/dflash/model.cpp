#include "kernels/dflash/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kprop/recent.h"
#include "kprop/rng.h"

namespace kprop::dflash {
namespace {

enum Tensor { kToken = 1, kPosition, kOutput, kQ, kK, kV, kO, kUp, kDown };
constexpr double kLogitScale = 4.0;
constexpr double kPositionScale = 0.8;

void rms_norm(const double* x, double* out, int d) {
  double sum = 0;
  for (int k = 0; k < d; ++k) sum += x[k] * x[k];
  const double inv = 1.0 / std::sqrt(sum / d + 1e-6);
  for (int k = 0; k < d; ++k) out[k] = x[k] * inv;
}

// out[r] = sum_c w[r][c] * x[c], w row-major [out.size()][x.size()]. The
// sizes are checked here, once per call; the loop is built without ASan's
// and UBSan's checks of every access (two thirds of its time in the
// sanitizer and fuzz builds, where it was a third of a dflash fuzz run):
// each index it forms is below the sizes checked.
__attribute__((no_sanitize("address", "undefined"))) void matvec_in_bounds(const double* w, const double* x,
                                                                           double* out, size_t rows,
                                                                           size_t cols) {
  for (size_t r = 0; r < rows; ++r) {
    double s = 0;
    for (size_t c = 0; c < cols; ++c) s += w[r * cols + c] * x[c];
    out[r] = s;
  }
}
void matvec(std::span<const double> w, std::span<const double> x, std::span<double> out) {
  if (w.size() != out.size() * x.size()) throw std::logic_error("TinyLM: matvec shapes disagree");
  matvec_in_bounds(w.data(), x.data(), out.data(), out.size(), x.size());
}

}  // namespace

double TinyLM::weight(int tensor, int layer, int row, int col, double scale) const {
  const uint64_t stream = static_cast<uint64_t>(tensor) << 32 | static_cast<uint64_t>(layer);
  const uint64_t index = static_cast<uint64_t>(row) << 24 | static_cast<uint64_t>(col);
  return scale * rng::normal(config_.seed, stream, index);
}

void TinyLM::add_position(int position, double* x) const {
  const int d = config_.d_model;
  auto embedding = [&](int pos, int k) {
    return kPositionScale * rng::normal(config_.seed, static_cast<uint64_t>(kPosition) << 32,
                                        static_cast<uint64_t>(pos) << 24 | static_cast<uint64_t>(k));
  };
  if (position < 0 || position >= kCachedPositions) {
    for (int k = 0; k < d; ++k) x[k] += embedding(position, k);
    return;
  }
  const std::lock_guard<std::mutex> lock(positions_->mutex);
  std::vector<double>& rows = positions_->rows;
  const size_t have = rows.size() / static_cast<size_t>(d);
  if (static_cast<size_t>(position) >= have) {
    rows.resize((static_cast<size_t>(position) + 1) * static_cast<size_t>(d));
    for (size_t pos = have; pos <= static_cast<size_t>(position); ++pos)
      for (int k = 0; k < d; ++k)
        rows[pos * static_cast<size_t>(d) + static_cast<size_t>(k)] = embedding(static_cast<int>(pos), k);
  }
  const double* row = &rows[static_cast<size_t>(position) * static_cast<size_t>(d)];
  for (int k = 0; k < d; ++k) x[k] += row[k];
}

TinyLM::TinyLM(const ModelConfig& c) : config_(c) {
  if (c.vocab < 1 || c.d_model < 1 || c.layers < 0 || c.heads < 1 || c.d_model % c.heads != 0)
    throw std::invalid_argument("TinyLM: bad config (heads must divide d_model)");
  head_dim_ = c.d_model / c.heads;
  const int d = c.d_model;
  auto fill = [&](std::vector<double>& w, int tensor, int layer, int rows, int cols) {
    w.resize(static_cast<size_t>(rows) * cols);
    const double scale = 1.0 / std::sqrt(static_cast<double>(cols));
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < cols; ++k)
        w[static_cast<size_t>(r) * cols + k] = weight(tensor, layer, r, k, scale);
  };
  fill(token_embedding_, kToken, 0, c.vocab, d);
  for (auto& x : token_embedding_) x *= std::sqrt(static_cast<double>(d));  // unit-variance rows
  fill(output_, kOutput, 0, c.vocab, d);
  if (c.tied < 0 || c.tied >= c.vocab) throw std::invalid_argument("TinyLM: tied must be in [0, vocab)");
  if (c.near_tie != 0 && (c.tied != 0 || !(std::fabs(c.near_tie) <= 0.5)))
    throw std::invalid_argument("TinyLM: near_tie must be in [-1/2, 1/2] and not with tied");
  for (int v = 1; v <= c.tied; ++v)
    std::copy(output_.begin(), output_.begin() + d, output_.begin() + static_cast<std::ptrdiff_t>(v) * d);
  layers_.resize(static_cast<size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l) {
    auto& L = layers_[static_cast<size_t>(l)];
    fill(L.wq, kQ, l, d, d);
    fill(L.wk, kK, l, d, d);
    fill(L.wv, kV, l, d, d);
    fill(L.wo, kO, l, d, d);
    fill(L.w1, kUp, l, 2 * d, d);
    fill(L.w2, kDown, l, d, 2 * d);
  }
}

std::shared_ptr<const TinyLM> TinyLM::shared(const ModelConfig& config) {
  // Small models only (a large-profile vocabulary is built each time rather
  // than kept).
  constexpr int64_t kMaxWeights = int64_t{1} << 20;
  static Recent<ModelConfig, TinyLM, 8> recent;
  const int64_t d = config.d_model;
  const int64_t weights = 2 * int64_t{config.vocab} * d + int64_t{config.layers} * 8 * d * d;
  auto make = [&] { return std::make_shared<const TinyLM>(config); };
  return weights > kMaxWeights ? make() : recent.get(config, make);
}

TinyLM::Cache TinyLM::empty_cache() const {
  Cache cache;
  cache.keys.resize(layers_.size());
  cache.values.resize(layers_.size());
  return cache;
}

void TinyLM::run_block(Cache& cache, std::span<const int> tokens, std::span<const int> positions,
                       const std::function<bool(int, int)>& visible, bool commit,
                       std::vector<Logits>* rows) const {
  const int d = config_.d_model, n = static_cast<int>(tokens.size()), past = cache.length;
  const size_t nd = static_cast<size_t>(n) * static_cast<size_t>(d);
  // Working buffers, reused across calls on this thread: a model step per
  // token of every decode makes their allocations a large share of a run
  // (a third of a dflash fuzz run under ASan). `visible` must not call back
  // into the model.
  struct Scratch {
    std::vector<double> x, h, q, k_new, v_new, attn, proj, up;
    std::vector<char> seen;
  };
  thread_local Scratch s;
  // visible(i, j) asked once per pair, not per layer, head and pass (a tree
  // mask walks the ancestors: it was a seventh of a check's time).
  std::vector<char>& seen = s.seen;
  seen.resize(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) seen[static_cast<size_t>(i) * n + j] = visible(i, j) ? 1 : 0;
  // Residual stream of the block, [n][d].
  std::vector<double>& x = s.x;
  x.resize(nd);
  for (int i = 0; i < n; ++i) {
    const int t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= config_.vocab) throw std::out_of_range("TinyLM: token out of vocabulary");
    for (int k = 0; k < d; ++k)
      x[static_cast<size_t>(i) * d + k] = token_embedding_[static_cast<size_t>(t) * d + k];
    add_position(positions[static_cast<size_t>(i)], &x[static_cast<size_t>(i) * d]);
  }
  // Every element of these is written before it is read.
  for (auto* v : {&s.h, &s.attn, &s.proj}) v->resize(static_cast<size_t>(d));
  for (auto* v : {&s.q, &s.k_new, &s.v_new}) v->resize(nd);
  s.up.resize(static_cast<size_t>(2 * d));
  std::vector<double>& h = s.h;
  std::vector<double>& q = s.q;
  std::vector<double>& k_new = s.k_new;
  std::vector<double>& v_new = s.v_new;
  std::vector<double>& attn = s.attn;
  std::vector<double>& proj = s.proj;
  std::vector<double>& up = s.up;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  auto sees = [&](int i, int j) { return seen[static_cast<size_t>(i) * n + j] != 0; };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    for (int i = 0; i < n; ++i) {
      rms_norm(&x[static_cast<size_t>(i) * d], h.data(), d);
      const size_t row = static_cast<size_t>(i) * d;
      matvec(L.wq, h, std::span(q).subspan(row, static_cast<size_t>(d)));
      matvec(L.wk, h, std::span(k_new).subspan(row, static_cast<size_t>(d)));
      matvec(L.wv, h, std::span(v_new).subspan(row, static_cast<size_t>(d)));
    }
    const auto& K = cache.keys[l];
    const auto& V = cache.values[l];
    for (int i = 0; i < n; ++i) {
      for (int head = 0; head < config_.heads; ++head) {
        const int off = head * head_dim_;
        const double* qi = &q[static_cast<size_t>(i) * d + off];
        auto score = [&](const double* key) {
          double s = 0;
          for (int k = 0; k < head_dim_; ++k) s += qi[k] * key[k];
          return s * scale;
        };
        // Two-pass softmax over visible keys: cached positions, then block.
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < past; ++j) m = std::max(m, score(&K[static_cast<size_t>(j) * d + off]));
        for (int j = 0; j < n; ++j)
          if (sees(i, j)) m = std::max(m, score(&k_new[static_cast<size_t>(j) * d + off]));
        double denom = 0;
        std::fill(attn.begin() + off, attn.begin() + off + head_dim_, 0.0);
        auto accumulate = [&](const double* key, const double* value) {
          const double p = std::exp(score(key) - m);
          denom += p;
          for (int k = 0; k < head_dim_; ++k) attn[static_cast<size_t>(off + k)] += p * value[k];
        };
        for (int j = 0; j < past; ++j)
          accumulate(&K[static_cast<size_t>(j) * d + off], &V[static_cast<size_t>(j) * d + off]);
        for (int j = 0; j < n; ++j)
          if (sees(i, j))
            accumulate(&k_new[static_cast<size_t>(j) * d + off], &v_new[static_cast<size_t>(j) * d + off]);
        for (int k = 0; k < head_dim_; ++k)
          attn[static_cast<size_t>(off + k)] = denom > 0 ? attn[static_cast<size_t>(off + k)] / denom : 0.0;
      }
      matvec(L.wo, attn, proj);
      for (int k = 0; k < d; ++k) x[static_cast<size_t>(i) * d + k] += proj[static_cast<size_t>(k)];
    }
    for (int i = 0; i < n; ++i) {
      double* xi = &x[static_cast<size_t>(i) * d];
      rms_norm(xi, h.data(), d);
      matvec(L.w1, h, up);
      for (auto& u : up) u = std::tanh(u);
      matvec(L.w2, up, proj);
      for (int k = 0; k < d; ++k) xi[k] += proj[static_cast<size_t>(k)];
    }
    if (commit) {
      cache.keys[l].insert(cache.keys[l].end(), k_new.begin(), k_new.end());
      cache.values[l].insert(cache.values[l].end(), v_new.begin(), v_new.end());
    }
  }
  auto logits_of = [&](int i, Logits& row) {
    row.resize(static_cast<size_t>(config_.vocab));
    rms_norm(&x[static_cast<size_t>(i) * d], h.data(), d);
    matvec(output_, h, row);
    for (auto& v : row) v *= kLogitScale;
    // One rounding of the exact product (token 1's own output row unused).
    if (config_.near_tie != 0) row[1] = row[0] * (1 + config_.near_tie);
  };
  if (rows) {
    rows->resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) logits_of(i, (*rows)[static_cast<size_t>(i)]);
  }
  if (commit) {
    cache.length += n;
    if (n > 0 && rows) cache.last_logits = rows->back();
    if (n > 0 && !rows) logits_of(n - 1, cache.last_logits);
  }
}

std::vector<Logits> TinyLM::forward_block(Cache& cache, std::span<const int> tokens,
                                          std::span<const int> positions,
                                          const std::function<bool(int, int)>& visible, bool commit) const {
  std::vector<Logits> rows;
  run_block(cache, tokens, positions, visible, commit, &rows);
  return rows;
}

void TinyLM::append(Cache& cache, int token, int position) const {
  const int tokens[1] = {token};
  const int positions[1] = {position};
  // Only the new position's logits, written into the cache's row in place
  // (a decode step per token: its allocations were a fifth of a dflash fuzz
  // run under ASan).
  run_block(
      cache, tokens, positions, [](int, int) { return true; }, true, nullptr);
}

Argmax argmax(const Logits& logits) {
  Argmax a;
  double best = -std::numeric_limits<double>::infinity(), second = best;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best) {
      second = best;
      best = logits[i];
      a.index = static_cast<int>(i);
    } else if (logits[i] > second) {
      second = logits[i];
    }
  }
  a.margin = best - second;
  return a;
}

Argmax argmax(const TinyLM& model, const Logits& logits) {
  Argmax a = argmax(logits);
  const bool near_pair = model.config().near_tie != 0 && a.index <= 1;
  if (!near_pair && (model.config().tied == 0 || a.margin > 0)) return a;
  double second = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i)
    if (!model.same_output_row(static_cast<int>(i), a.index) && !(near_pair && i <= 1))
      second = std::max(second, logits[i]);
  a.margin = logits[static_cast<size_t>(a.index)] - second;
  if (near_pair) a.margin = std::min(a.margin, std::fabs(logits[0]));
  return a;
}

}  // namespace kprop::dflash
