// softmax_topk as an external target (include/kprop/abi/softmax_topk.h):
// kprop's own fused kernel behind the C ABI passes specs/softmax_topk.yaml
// in-process, and so does the NumPy worker of examples/python/softmax_topk.py
// through exec:; a planted bug fails either way with a counterexample.
#include <gtest/gtest.h>

#include <string>

#include "kprop/runner.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "properties/softmax_topk/family.h"
#include "tests/support/python_worker.h"

namespace {

using namespace kprop::softmax_topk;

const std::string kSpec = KPROP_SOURCE_DIR "/specs/softmax_topk.yaml";

// `bug`: a planted bug, shrunk for the first invariant it breaks only.
kprop::RunOptions quick(const std::string& target = "", bool bug = false) {
  kprop::RunOptions o;
  o.target = target;
  o.stop_on_first_failure = bug;
  o.seed = 20261122;
  o.trials = 100;
  o.write_corpus = false;
  return o;
}

// ---------------------------------------- an ABI entry point around a Result
// Offset of element (row, col) of a 2-D view, through its strides.
int64_t offset(const kprop_tensor& t, int64_t row, int64_t col) {
  const int64_t index[2] = {row, col};
  return kprop_offset(&t, index);
}

// Runs `Impl` (an implementation of kprop's family) on the views.
template <Result (*Impl)(const Case&)>
int entry(const kprop_softmax_topk_args* a, char*, size_t) {
  const bool f32 = a->logits.dtype == KPROP_F32;
  const int64_t rows = a->logits.shape[0];
  Case c;
  c.dtype = f32 ? DType::f32 : DType::f64;
  c.vocab = static_cast<int>(a->logits.shape[1]);
  c.k = a->k;
  c.block = a->block;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < c.vocab; ++i) {
      const int64_t at = offset(a->logits, r, i);
      c.logits.push_back(f32 ? static_cast<const float*>(a->logits.data)[at]
                             : static_cast<const double*>(a->logits.data)[at]);
    }
  const Result res = Impl(c);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c.k; ++j) {
      const size_t slot = static_cast<size_t>(r * c.k + j);
      const int64_t at = offset(a->probs, r, j);
      if (f32)
        static_cast<float*>(a->probs.data)[at] = static_cast<float>(res.probs[slot]);
      else
        static_cast<double*>(a->probs.data)[at] = res.probs[slot];
      static_cast<int32_t*>(a->indices.data)[offset(a->indices, r, j)] = res.indices[slot];
    }
  return KPROP_OK;
}

Result tie_high_index(const Case& c) {
  for (const Mutant& m : mutants())
    if (std::string(m.name) == "tie_high_index") return m.run(c);
  throw std::logic_error("no mutant tie_high_index");
}

// The invariant that killed the run with a counterexample, "" when none did.
using kprop::testing::killed_by;

TEST(SoftmaxTopkExternal, FusedBehindTheAbiPassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(kSpec, {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<fused>)}}, quick());
}

TEST(SoftmaxTopkExternal, PlantedBugFailsInProcess) {
  const kprop::RunReport report = kprop::testing::run_in_process(
      kSpec, {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<tie_high_index>)}}, quick("", true));
  EXPECT_EQ(report.status, kprop::RunStatus::failed);
  EXPECT_NE(killed_by(report), "");
}

// -------------------------------------------------- the NumPy worker, exec:
TEST(SoftmaxTopkExternal, NumpyWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  EXPECT_TRUE(
      kprop::testing::spec_passes(kprop_test::run_python_worker(kSpec, "softmax_topk.py", "", quick())));
}

TEST(SoftmaxTopkExternal, NumpyWorkerBugsFail) {
  KPROP_REQUIRE_PYTHON();
  kprop_test::expect_planted_bugs_caught(
      kSpec, "softmax_topk.py", {"tie_high_index", "neg_inf_selected_early", "unsorted_output"}, quick());
}

}  // namespace
