// The batched beam search: every prompt of the batch lives in one flat pool
// (structure of arrays, B x K slots, prompt b owning slots [bK, bK + K)), each
// step evaluates the logits of all unfinished slots as one [rows x V] matrix,
// normalises it row-wise in place, scores every candidate in one flat pass and
// selects each prompt's K best by partial sort over candidate indices. Prompts
// never share a selection: a prompt's candidates compete only among themselves.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/beam/beam.h"

namespace kprop::beam {
namespace {

struct Pool {
  int L = 0;
  std::vector<int> tokens;  // slot-major, L per slot
  std::vector<int> length;
  std::vector<uint8_t> finished;
  std::vector<double> logprob, score;
  std::vector<Prefix> state;
  void resize(size_t slots, int max_len) {
    L = max_len;
    tokens.assign(slots * static_cast<size_t>(max_len), 0);
    length.assign(slots, 0);
    finished.assign(slots, 0);
    logprob.assign(slots, 0);
    score.assign(slots, 0);
    state.assign(slots, Prefix{});
  }
  const int* row(size_t slot) const { return tokens.data() + slot * static_cast<size_t>(L); }
  int* row(size_t slot) { return tokens.data() + slot * static_cast<size_t>(L); }
  Hypothesis hypothesis(size_t slot) const {
    return {std::vector<int>(row(slot), row(slot) + length[slot]), logprob[slot], score[slot],
            finished[slot] != 0};
  }
};

}  // namespace

namespace {

// `flat_ties`: the mutant ties_by_flat_index, which breaks an exact tie by
// the candidate's flat (slot, token) index, as torch.topk over beam x vocab
// does, not by the contract's lexicographic order.
Result batched_search(const Case& c, bool flat_ties) {
  const TableLM model(c.model);
  const int B = static_cast<int>(c.prompts.size()), K = c.beam_width, V = model.vocab(), L = c.max_new_tokens;
  const int eos = c.model.eos;
  const size_t slots = static_cast<size_t>(B) * static_cast<size_t>(K);

  Pool cur, next;
  cur.resize(slots, L);
  next.resize(slots, L);
  std::vector<int> count(static_cast<size_t>(B),
                         1);  // live slots per prompt; each starts with its empty root
  std::vector<uint8_t> done(static_cast<size_t>(B), 0);
  for (int b = 0; b < B; ++b)
    cur.state[static_cast<size_t>(b) * K] = model.start(c.prompts[static_cast<size_t>(b)]);
  std::vector<double> denom(static_cast<size_t>(L) + 1, 1.0);  // len^alpha, one pow per length
  for (int len = 1; len <= L; ++len)
    denom[static_cast<size_t>(len)] = std::pow(static_cast<double>(len), c.alpha);

  Result out;
  out.prompts.resize(static_cast<size_t>(B));
  std::vector<int> rows, row_of(slots, -1);
  std::vector<double> lp;
  // A candidate is (slot, v): v < V extends the slot by token v, v == V keeps a finished slot as is.
  std::vector<int> cand_slot, cand_token, order;
  std::vector<double> cand_score;

  for (int step = 1; step <= L; ++step) {
    // 1. Logits of every unfinished slot of every live prompt, one matrix.
    rows.clear();
    for (int b = 0; b < B; ++b)
      if (!done[static_cast<size_t>(b)])
        for (int i = 0; i < count[static_cast<size_t>(b)]; ++i) {
          const size_t s = static_cast<size_t>(b) * K + i;
          if (!cur.finished[s]) {
            row_of[s] = static_cast<int>(rows.size());
            rows.push_back(static_cast<int>(s));
          }
        }
    lp.resize(rows.size() * static_cast<size_t>(V));
    for (size_t r = 0; r < rows.size(); ++r)
      model.logits(cur.state[static_cast<size_t>(rows[r])], lp.data() + r * V);
    // 2. Row-wise log-softmax in place (max, exp-sum in index order, subtract):
    // the kernel's own, not the model's log_softmax, which the reference
    // ranks with (a bug here must not be the oracle's too).
    for (size_t r = 0; r < rows.size(); ++r) {
      double* x = lp.data() + r * V;
      double m = x[0];
      for (int v = 1; v < V; ++v) m = std::max(m, x[v]);
      double sum = 0;
      for (int v = 0; v < V; ++v) sum += std::exp(x[v] - m);
      const double log_sum = std::log(sum);
      for (int v = 0; v < V; ++v) x[v] = x[v] - m - log_sum;
    }
    // 3. Per prompt: score its candidates, keep the K best.
    bool all_done = true;
    for (int b = 0; b < B; ++b) {
      const size_t base = static_cast<size_t>(b) * K;
      Beams& beams = out.prompts[static_cast<size_t>(b)];
      if (done[static_cast<size_t>(b)]) {
        for (int i = 0; i < count[static_cast<size_t>(b)]; ++i) {  // carry the finished pool over
          const size_t s = base + i;
          std::copy(cur.row(s), cur.row(s) + L, next.row(s));
          next.length[s] = cur.length[s], next.finished[s] = cur.finished[s];
          next.logprob[s] = cur.logprob[s], next.score[s] = cur.score[s], next.state[s] = cur.state[s];
        }
        continue;
      }
      cand_slot.clear(), cand_token.clear(), cand_score.clear();
      for (int i = 0; i < count[static_cast<size_t>(b)]; ++i) {
        const size_t s = base + i;
        if (cur.finished[s]) {
          cand_slot.push_back(static_cast<int>(s)), cand_token.push_back(V),
              cand_score.push_back(cur.score[s]);
          continue;
        }
        const double* x = lp.data() + static_cast<size_t>(row_of[s]) * V;
        const double d = denom[static_cast<size_t>(cur.length[s]) + 1];
        for (int v = 0; v < V; ++v) {
          cand_slot.push_back(static_cast<int>(s)), cand_token.push_back(v);
          cand_score.push_back((cur.logprob[s] + x[v]) / d);
        }
      }
      const size_t n = cand_slot.size();
      order.resize(n);
      std::iota(order.begin(), order.end(), 0);
      auto cand_better = [&](int a, int z) {
        if (cand_score[static_cast<size_t>(a)] != cand_score[static_cast<size_t>(z)])
          return cand_score[static_cast<size_t>(a)] > cand_score[static_cast<size_t>(z)];
        if (flat_ties) return a < z;
        // Lexicographic on parent tokens ++ (new token, if any).
        const size_t sa = static_cast<size_t>(cand_slot[static_cast<size_t>(a)]);
        const size_t sz = static_cast<size_t>(cand_slot[static_cast<size_t>(z)]);
        const int ta = cand_token[static_cast<size_t>(a)], tz = cand_token[static_cast<size_t>(z)];
        const int la = cur.length[sa] + (ta < V), lz = cur.length[sz] + (tz < V);
        for (int k = 0; k < std::min(la, lz); ++k) {
          const int xa = k < cur.length[sa] ? cur.row(sa)[k] : ta;
          const int xz = k < cur.length[sz] ? cur.row(sz)[k] : tz;
          if (xa != xz) return xa < xz;
        }
        return la < lz;
      };
      const size_t keep = std::min(n, static_cast<size_t>(K));
      const size_t sorted = std::min(n, keep + 1);  // one more for the pruning margin
      std::partial_sort(order.begin(), order.begin() + static_cast<long>(sorted), order.end(), cand_better);
      if (n > keep)
        beams.prune_margin = std::min(beams.prune_margin, cand_score[static_cast<size_t>(order[keep - 1])] -
                                                              cand_score[static_cast<size_t>(order[keep])]);
      // 4. Gather the survivors into the next pool.
      bool all_finished = true;
      beams.pools.emplace_back();
      for (size_t j = 0; j < keep; ++j) {
        const size_t from = static_cast<size_t>(cand_slot[static_cast<size_t>(order[j])]);
        const int v = cand_token[static_cast<size_t>(order[j])];
        const size_t to = base + j;
        std::copy(cur.row(from), cur.row(from) + cur.length[from], next.row(to));
        next.length[to] = cur.length[from];
        next.logprob[to] = cur.logprob[from];
        next.state[to] = cur.state[from];
        next.finished[to] = cur.finished[from];
        if (v < V) {
          next.row(to)[next.length[to]++] = v;
          next.logprob[to] += lp[static_cast<size_t>(row_of[from]) * V + static_cast<size_t>(v)];
          next.state[to] = model.push(cur.state[from], v);
          next.finished[to] = v == eos;
        }
        next.score[to] = cand_score[static_cast<size_t>(order[j])];
        all_finished = all_finished && next.finished[to];
        beams.pools.back().push_back(next.hypothesis(to));
      }
      count[static_cast<size_t>(b)] = static_cast<int>(keep);
      done[static_cast<size_t>(b)] = all_finished;
      all_done = all_done && all_finished;
    }
    std::swap(cur, next);
    if (all_done) break;
  }
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < count[static_cast<size_t>(b)]; ++i)
      out.prompts[static_cast<size_t>(b)].hypotheses.push_back(
          cur.hypothesis(static_cast<size_t>(b) * K + i));
  return out;
}

}  // namespace

Result batched(const Case& c) {
  return batched_search(c, false);
}

Result batched_flat_ties(const Case& c) {
  return batched_search(c, true);
}

}  // namespace kprop::beam
