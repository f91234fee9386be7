// layernorm as an external target (include/kprop/abi/layernorm.h): kprop's
// own fused kernel behind the C ABI passes specs/layernorm.yaml in-process,
// and so does the NumPy worker of examples/python/layernorm.py through exec:;
// a planted bug fails either way with a counterexample.
#include <gtest/gtest.h>

#include <string>

#include "kprop/runner.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "properties/layernorm/family.h"
#include "tests/support/python_worker.h"

namespace {

using namespace kprop::layernorm;

const std::string kSpec = KPROP_SOURCE_DIR "/specs/layernorm.yaml";

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
// Element (i0, i1) of a view of either float dtype, through its strides.
double element(const kprop_tensor& t, int64_t i0, int64_t i1 = 0) {
  const int64_t index[2] = {i0, i1};
  const int64_t at = kprop_offset(&t, index);
  return t.dtype == KPROP_F32 ? static_cast<const float*>(t.data)[at]
                              : static_cast<const double*>(t.data)[at];
}

void store(const kprop_tensor& t, double v, int64_t i0, int64_t i1 = 0) {
  const int64_t index[2] = {i0, i1};
  const int64_t at = kprop_offset(&t, index);
  if (t.dtype == KPROP_F32)
    static_cast<float*>(t.data)[at] = static_cast<float>(v);
  else
    static_cast<double*>(t.data)[at] = v;
}

// Runs `Impl` (an implementation of kprop's family) on the views.
template <Result (*Impl)(const Case&)>
int entry(const kprop_layernorm_args* a, char*, size_t) {
  Case c;
  c.dtype = a->x.dtype == KPROP_F32 ? DType::f32 : DType::f64;
  c.rows = static_cast<int>(a->x.shape[0]);
  c.dim = static_cast<int>(a->x.shape[1]);
  c.eps = a->eps;
  for (int r = 0; r < c.rows; ++r)
    for (int d = 0; d < c.dim; ++d) c.x.push_back(element(a->x, r, d)), c.dy.push_back(element(a->dy, r, d));
  for (int d = 0; d < c.dim; ++d)
    c.gamma.push_back(element(a->gamma, d)), c.beta.push_back(element(a->beta, d));
  const Result res = Impl(c);
  const size_t D = static_cast<size_t>(c.dim);
  for (int r = 0; r < c.rows; ++r) {
    for (int d = 0; d < c.dim; ++d) {
      const size_t at = static_cast<size_t>(r) * D + static_cast<size_t>(d);
      store(a->y, res.y[at], r, d);
      store(a->xhat, res.xhat[at], r, d);
      store(a->dx, res.dx[at], r, d);
    }
    store(a->mean, res.mean[static_cast<size_t>(r)], r);
    store(a->rstd, res.rstd[static_cast<size_t>(r)], r);
  }
  for (int d = 0; d < c.dim; ++d) {
    store(a->dgamma, res.dgamma[static_cast<size_t>(d)], d);
    store(a->dbeta, res.dbeta[static_cast<size_t>(d)], d);
  }
  return KPROP_OK;
}

Result missing_proj_term(const Case& c) {
  for (const Mutant& m : mutants())
    if (std::string(m.name) == "missing_proj_term") return m.run(c);
  throw std::logic_error("no mutant missing_proj_term");
}

// The invariant that killed the run with a counterexample, "" when none did.
using kprop::testing::killed_by;

kprop::RunReport run_entry(kprop_layernorm_fn fn) {
  return kprop::testing::run_in_process(kSpec, {{"kprop_layernorm", reinterpret_cast<void*>(fn)}},
                                        quick("", true));
}

TEST(LayernormExternal, FusedBehindTheAbiPassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(kSpec, {{"kprop_layernorm", reinterpret_cast<void*>(&entry<fused>)}}, quick());
}

TEST(LayernormExternal, PlantedBugFailsInProcess) {
  const kprop::RunReport report = run_entry(&entry<missing_proj_term>);
  EXPECT_EQ(report.status, kprop::RunStatus::failed);
  EXPECT_NE(killed_by(report), "");
}

// -------------------------------------------------- the NumPy worker, exec:
TEST(LayernormExternal, NumpyWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  EXPECT_TRUE(kprop::testing::spec_passes(kprop_test::run_python_worker(kSpec, "layernorm.py", "", quick())));
}

TEST(LayernormExternal, NumpyWorkerBugsFail) {
  KPROP_REQUIRE_PYTHON();
  kprop_test::expect_planted_bugs_caught(kSpec, "layernorm.py",
                                         {"naive_variance", "missing_proj_term", "dgamma_no_xhat"}, quick());
}

}  // namespace
