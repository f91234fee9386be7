// beam.step for kernels built elsewhere (include/kprop/abi/beam.h). kprop
// owns the model and drives the search: each step sends the batch's pool and
// the logits of every entry, then rebuilds the pool from the parents and
// tokens the step chose, with the log-probs and scores it reported, so the
// hypotheses and the pool trace the invariants check are the step's own.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "properties/beam/family.h"

namespace kprop::beam {
namespace {

using external::Message;
using external::TargetFailure;

// One slot of kprop's copy of the flat B x K pool.
struct Slot {
  bool valid = false;
  int prompt = -1;  // the prompt whose root the beam grew from (it keeps it wherever it moves)
  Hypothesis h;
  Prefix state;  // the model after prompt ++ h.tokens
};

struct Search {
  const Case& c;
  TableLM model;
  int64_t batch, width, max_len, vocab;
  std::vector<Slot> pool;     // slot b * width + i
  std::vector<int64_t> done;  // per prompt, as the step last reported it

  explicit Search(const Case& kase)
      : c(kase),
        model(kase.model),
        batch(static_cast<int64_t>(kase.prompts.size())),
        width(kase.beam_width),
        max_len(kase.max_new_tokens),
        vocab(kase.model.vocab),
        pool(static_cast<size_t>(batch * width)),
        done(static_cast<size_t>(batch), 0) {
    for (int b = 0; b < batch; ++b)  // each prompt starts from its empty root
      pool[static_cast<size_t>(b * width)] = {true, b, {}, model.start(kase.prompts[static_cast<size_t>(b)])};
  }

  Message request(int step) const {
    const size_t slots = pool.size();
    const size_t L = static_cast<size_t>(max_len), V = static_cast<size_t>(vocab);
    constexpr double kNone = -std::numeric_limits<double>::infinity();
    std::vector<int64_t> tokens(slots * L, -1), lengths(slots, 0), finished(slots, 0), valid(slots, 0);
    std::vector<double> logprob(slots, kNone), score(slots, kNone), logits(slots * V, 0.0);
    for (size_t s = 0; s < slots; ++s) {
      const Slot& e = pool[s];
      if (!e.valid) continue;
      std::copy(e.h.tokens.begin(), e.h.tokens.end(), tokens.begin() + static_cast<std::ptrdiff_t>(s * L));
      lengths[s] = static_cast<int64_t>(e.h.tokens.size());
      finished[s] = e.h.finished;
      valid[s] = 1;
      logprob[s] = e.h.logprob;
      score[s] = e.h.score;
      model.logits(e.state, logits.data() + s * V);
    }
    std::vector<int64_t> prompt_lengths;
    for (const auto& p : c.prompts) prompt_lengths.push_back(static_cast<int64_t>(p.size()));
    const std::vector<int64_t> slot_shape = {batch, width};
    Message m;
    m.op = "beam.step";
    m.input(external::Tensor::of_ints("tokens", KPROP_I32, {batch, width, max_len}, tokens))
        .input(external::Tensor::of_ints("lengths", KPROP_I32, slot_shape, lengths))
        .input(external::Tensor::of("logprob", KPROP_F64, slot_shape, logprob))
        .input(external::Tensor::of("score", KPROP_F64, slot_shape, score))
        .input(external::Tensor::of_ints("finished", KPROP_U8, slot_shape, finished))
        .input(external::Tensor::of_ints("valid", KPROP_U8, slot_shape, valid))
        .input(external::Tensor::of("logits", KPROP_F64, {batch, width, vocab}, logits))
        .input(external::Tensor::of_ints("prompt_lengths", KPROP_I32, {batch}, prompt_lengths))
        .input(external::Tensor::of_ints("done", KPROP_U8, {batch}, done));
    m.attrs = {{"beam_width", width},
               {"max_new_tokens", max_len},
               {"step", step},
               {"eos", c.model.eos},
               {"alpha", c.alpha}};
    m.output("parent", KPROP_I32, slot_shape)
        .output("token", KPROP_I32, slot_shape)
        .output("next_logprob", KPROP_F64, slot_shape)
        .output("next_score", KPROP_F64, slot_shape)
        .output("next_done", KPROP_U8, {batch});
    return m;
  }

  // The new pool from the step's choices; a parent that is no beam or a
  // token outside the vocabulary breaks the protocol.
  void advance(const Message& reply, int step) {
    const std::vector<int64_t> parent = reply.tensor("parent").to_ints();
    const std::vector<int64_t> token = reply.tensor("token").to_ints();
    const std::vector<double> logprob = reply.tensor("next_logprob").to_doubles();
    const std::vector<double> score = reply.tensor("next_score").to_doubles();
    std::vector<Slot> next(pool.size());
    for (size_t s = 0; s < pool.size(); ++s) {
      const int64_t p = parent[s], v = token[s];
      if (p == -1) continue;  // an empty slot
      const auto where = [&] {
        return fmt::format("beam.step at step {}, slot ({}, {})", step, s / width, s % width);
      };
      if (p < -1 || p >= static_cast<int64_t>(pool.size()) || !pool[static_cast<size_t>(p)].valid)
        throw TargetFailure("error", fmt::format("{}: parent {} is not a beam of the pool", where(), p));
      if (v < -1 || v >= vocab)
        throw TargetFailure("error", fmt::format("{}: token {} outside [-1, {})", where(), v, vocab));
      Slot e = pool[static_cast<size_t>(p)];
      if (v >= 0) {
        e.h.tokens.push_back(static_cast<int>(v));
        e.h.finished = v == c.model.eos;
        e.state = model.push(e.state, static_cast<int>(v));
      }
      e.h.logprob = logprob[s];
      e.h.score = score[s];
      next[s] = std::move(e);
    }
    pool = std::move(next);
  }
};

Result drive_search(const Case& c, external::Transport& target) {
  Search search(c);
  Result out;
  out.prompts.resize(c.prompts.size());
  for (int step = 1; step <= c.max_new_tokens; ++step) {
    const Message reply = target.call(search.request(step));
    search.advance(reply, step);
    // The trace: a pool per step for each prompt still searching, in slot order.
    for (size_t b = 0; b < out.prompts.size(); ++b)
      if (!search.done[b]) out.prompts[b].pools.emplace_back();
    for (const Slot& e : search.pool)
      if (e.valid && !search.done[static_cast<size_t>(e.prompt)])
        out.prompts[static_cast<size_t>(e.prompt)].pools.back().push_back(e.h);
    const std::vector<int64_t> done = reply.tensor("next_done").to_flags("beam.step");
    // next_done steers the drive, so each step's flag is kept next to what
    // the contract asks of it (b's new pool all finished, empty slots
    // aside), for every prompt, carried ones too: finished_retained compares
    // them, in both directions, at every step (L included, where the trace
    // alone could not show a missing flag).
    for (size_t b = 0; b < done.size(); ++b) {
      bool all_finished = true;
      for (int64_t i = 0; i < search.width; ++i) {
        const Slot& e = search.pool[b * static_cast<size_t>(search.width) + static_cast<size_t>(i)];
        all_finished = all_finished && (!e.valid || e.h.finished);
      }
      out.prompts[b].reported_done.push_back(done[b] != 0);
      out.prompts[b].pool_finished.push_back(all_finished);
      search.done[b] = done[b] != 0;
    }
    if (std::all_of(done.begin(), done.end(), [](int64_t d) { return d != 0; })) break;
  }
  // The result is the final pool, in the step's (best-first) slot order; the
  // prune margin stays +inf: near-tie discards read the reference's.
  for (const Slot& e : search.pool)
    if (e.valid) out.prompts[static_cast<size_t>(e.prompt)].hypotheses.push_back(e.h);
  return out;
}

void invoke_step(void* fn, const Message& req, Message& reply) {
  kprop_beam_step_args a{};
  external::in_views(req, {KPROP_NAMED(a, tokens), KPROP_NAMED(a, lengths), KPROP_NAMED(a, logprob),
                           KPROP_NAMED(a, score), KPROP_NAMED(a, finished), KPROP_NAMED(a, valid),
                           KPROP_NAMED(a, logits), KPROP_NAMED(a, prompt_lengths), KPROP_NAMED(a, done)});
  external::in_attrs(req, {KPROP_NAMED(a, beam_width), KPROP_NAMED(a, max_new_tokens), KPROP_NAMED(a, step),
                           KPROP_NAMED(a, eos), KPROP_NAMED(a, alpha)});
  external::out_views(reply, {KPROP_NAMED(a, parent), KPROP_NAMED(a, token), KPROP_NAMED(a, next_logprob),
                              KPROP_NAMED(a, next_score), KPROP_NAMED(a, next_done)});
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_external(FamilyDef<Traits>& f) {
  f.external({{"beam.step",
               "kprop_beam_step",
               invoke_step,
               {"parent", "token", "next_logprob", "next_score", "next_done"},
               // "any value for empty slots" (kprop/abi/beam.h): unwritten there is fine.
               {"next_logprob", "next_score"}}},
             drive_search);
}

}  // namespace kprop::beam
