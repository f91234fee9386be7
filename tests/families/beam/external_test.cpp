// beam.step as an external target (include/kprop/abi/beam.h): a step written
// against the C ABI alone passes specs/beam.yaml in-process and the NumPy
// worker of examples/python/beam_search.py passes through exec:; the same
// steps with a real bug planted fail with a counterexample.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kprop/runner.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "tests/support/python_worker.h"

namespace {

const std::string kSpec = KPROP_SOURCE_DIR "/specs/beam.yaml";

// A planted bug needs one shrunk counterexample, not one per invariant.
kprop::RunOptions quick(int64_t trials, bool expect_failure = false) {
  kprop::RunOptions o;
  o.seed = 20261122;
  o.trials = trials;
  o.write_corpus = false;
  o.stop_on_first_failure = expect_failure;
  return o;
}

// ------------------------------------------------ a step from the ABI alone
template <typename T>
T& at(const kprop_tensor& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
  const int64_t index[3] = {i0, i1, i2};
  return static_cast<T*>(t.data)[kprop_offset(&t, index)];
}

enum class Bug {
  none,
  drop_finished,
  penalty_compounding,
  stop_at_first_eos,
  never_done,
  done_late,
  no_done_at_l
};

struct Candidate {
  int64_t parent;  // slot within the prompt
  int32_t token;   // -1: the finished beam kept as is
  double logprob, score;
  std::vector<int32_t> tokens;
};

template <Bug bug>
int beam_step(const kprop_beam_step_args* a, char*, size_t) {
  const int64_t batch = a->parent.shape[0], width = a->parent.shape[1];
  const int64_t vocab = a->logits.shape[2];
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Candidate> candidates;
    const bool done = at<uint8_t>(a->done, b) != 0;
    for (int64_t i = 0; i < width; ++i) {
      if (!at<uint8_t>(a->valid, b, i)) continue;
      const double logprob = at<double>(a->logprob, b, i), score = at<double>(a->score, b, i);
      const int32_t length = at<int32_t>(a->lengths, b, i);
      std::vector<int32_t> tokens;
      for (int32_t k = 0; k < length; ++k) tokens.push_back(at<int32_t>(a->tokens, b, i, k));
      if (at<uint8_t>(a->finished, b, i) || done) {
        if (bug != Bug::drop_finished || done) candidates.push_back({i, -1, logprob, score, tokens});
        continue;
      }
      double max = -INFINITY, sum = 0;  // log_softmax of the row, as kernels/beam computes it
      for (int64_t v = 0; v < vocab; ++v) max = std::max(max, at<double>(a->logits, b, i, v));
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(at<double>(a->logits, b, i, v) - max);
      const double log_sum = std::log(sum);
      const double penalty = std::pow(length + 1.0, a->alpha);
      const double running = bug == Bug::penalty_compounding ? score : logprob;
      for (int32_t v = 0; v < vocab; ++v) {
        const double lpv = at<double>(a->logits, b, i, v) - max - log_sum;
        std::vector<int32_t> grown = tokens;
        grown.push_back(v);
        candidates.push_back({i, v, logprob + lpv, (running + lpv) / penalty, std::move(grown)});
      }
    }
    // A done prompt's pool is already in order: sorting keeps it.
    std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
      if (x.score != y.score) return x.score > y.score;
      return x.tokens < y.tokens;
    });
    bool all_finished = true, any_finished = false;
    for (int64_t j = 0; j < width; ++j) {
      const bool used = j < static_cast<int64_t>(candidates.size());
      const Candidate* c = used ? &candidates[static_cast<size_t>(j)] : nullptr;
      at<int32_t>(a->parent, b, j) = used ? static_cast<int32_t>(b * width + c->parent) : -1;
      at<int32_t>(a->token, b, j) = used ? c->token : -1;
      at<double>(a->next_logprob, b, j) = used ? c->logprob : -INFINITY;
      at<double>(a->next_score, b, j) = used ? c->score : -INFINITY;
      if (!used) continue;
      const bool finished = c->token >= 0 ? c->token == a->eos : at<uint8_t>(a->finished, b, c->parent) != 0;
      all_finished = all_finished && finished;
      any_finished = any_finished || finished;
    }
    bool next_done = done || all_finished || (bug == Bug::stop_at_first_eos && any_finished);
    if (bug == Bug::never_done) next_done = false;
    if (bug == Bug::done_late) {  // done from the pool before the step: one step late
      bool was_finished = true;
      for (int64_t i = 0; i < width; ++i)
        was_finished = was_finished && (!at<uint8_t>(a->valid, b, i) || at<uint8_t>(a->finished, b, i));
      next_done = done || (a->step > 1 && was_finished);
    }
    if (bug == Bug::no_done_at_l && a->step == a->max_new_tokens) next_done = false;
    at<uint8_t>(a->next_done, b) = next_done;
  }
  return KPROP_OK;
}

kprop::RunReport run_step(kprop_beam_step_fn step, int64_t trials) {
  return kprop::testing::run_in_process(kSpec, {{"kprop_beam_step", reinterpret_cast<void*>(step)}},
                                        quick(trials, true));
}

// The invariant that killed the run, "" when none did.
using kprop::testing::killed_by;

TEST(BeamExternal, CorrectStepPassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(kSpec, {{"kprop_beam_step", reinterpret_cast<void*>(&beam_step<Bug::none>)}},
                           quick(150));
}

TEST(BeamExternal, PlantedBugsFailInProcess) {
  for (auto [name, step] : {std::pair{"drop_finished", &beam_step<Bug::drop_finished>},
                            std::pair{"penalty_compounding", &beam_step<Bug::penalty_compounding>},
                            std::pair{"stop_at_first_eos", &beam_step<Bug::stop_at_first_eos>}}) {
    const kprop::RunReport report = run_step(step, 150);
    EXPECT_EQ(report.status, kprop::RunStatus::failed) << name;
    EXPECT_NE(killed_by(report), "") << name;
  }
}

// next_done left unset, or set a step late, or left unset at the last step
// only: the search ran on (or, at step L, ended) with the flag wrong. Before
// next_done was compared with the pool, only a flag set too early failed.
TEST(BeamExternal, NextDoneLateOrMissingFails) {
  for (auto [name, step] : {std::pair{"never_done", &beam_step<Bug::never_done>},
                            std::pair{"done_late", &beam_step<Bug::done_late>},
                            std::pair{"no_done_at_l", &beam_step<Bug::no_done_at_l>}}) {
    const kprop::RunReport report = run_step(step, 150);
    EXPECT_EQ(report.status, kprop::RunStatus::failed) << name;
    EXPECT_EQ(killed_by(report), "finished_retained") << name;
  }
}

// Picking an empty slot as a parent (here: slot 1 at step 1, where each
// prompt has only its root) breaks the protocol: the target failed, not an
// invariant.
int empty_parent(const kprop_beam_step_args* a, char*, size_t) {
  const int64_t batch = a->parent.shape[0], width = a->parent.shape[1];
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < width; ++j) {
      at<int32_t>(a->parent, b, j) = static_cast<int32_t>(b * width + 1);
      at<int32_t>(a->token, b, j) = 0;
    }
    at<uint8_t>(a->next_done, b) = 0;
  }
  return KPROP_OK;
}

TEST(BeamExternal, EmptyParentBreaksTheProtocol) {
  const kprop::RunReport report = run_step(&empty_parent, 20);
  EXPECT_EQ(report.status, kprop::RunStatus::crashed);
  EXPECT_NE(report.detail.find("is not a beam of the pool"), std::string::npos) << report.detail;
}

// -------------------------------------------------- the NumPy worker, exec:
std::string worker(const std::string& args = "") {
  return kprop_test::python_worker("beam_search.py", args);
}

kprop::RunReport run_worker(const std::string& target, int64_t trials, bool expect_failure) {
  kprop::RunOptions o = quick(trials, expect_failure);
  o.target = target;
  return kprop::run_spec(kprop::load_spec(kSpec), o);
}

TEST(BeamExternal, NumpyWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  const kprop::RunReport report = run_worker(worker(), 60, false);
  EXPECT_TRUE(kprop::testing::spec_passes(report));
}

TEST(BeamExternal, NumpyWorkerBugsFail) {
  KPROP_REQUIRE_PYTHON();
  for (const char* bug : {"drop_finished", "penalty_compounding", "batch_pool_leak"}) {
    const kprop::RunReport report = run_worker(worker(std::string(" --bug ") + bug), 80, true);
    EXPECT_EQ(report.status, kprop::RunStatus::failed) << bug;
    EXPECT_NE(killed_by(report), "") << bug;
  }
}

}  // namespace
