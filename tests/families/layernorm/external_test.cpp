// layernorm as an external target (include/kprop/abi/layernorm.h): kprop's
// own fused kernel behind the C ABI passes specs/layernorm.yaml in-process,
// and so does the NumPy worker of examples/python/layernorm.py through exec:;
// a planted bug fails either way with a counterexample. The committed spec
// draws f16, bf16, f32 and f64 cases, so each run reaches half cases through
// the ABI (KPROP_F16 / KPROP_BF16 tensors; mean and rstd are f32 there).
#include <gtest/gtest.h>

#include <string>

#include "kprop/half.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "properties/layernorm/family.h"
#include "tests/support/abi_entry.h"
#include "tests/support/python_worker.h"

namespace {

using namespace kprop::layernorm;
using namespace kprop::testing;  // element, store, quick (abi_entry.h)

const std::string kSpec = KPROP_SOURCE_DIR "/specs/layernorm.yaml";

// ---------------------------------------- an ABI entry point around a Result
DType case_dtype(int32_t abi) {
  switch (abi) {
    case KPROP_F32:
      return DType::f32;
    case KPROP_F16:
      return DType::f16;
    case KPROP_BF16:
      return DType::bf16;
    default:
      return DType::f64;
  }
}

// Runs `Impl` (an implementation of kprop's family) on the views.
template <Result (*Impl)(const Case&)>
int entry(const kprop_layernorm_args* a, char*, size_t) {
  Case c;
  c.dtype = case_dtype(a->x.dtype);
  if (is_half(c.dtype) && (a->mean.dtype != KPROP_F32 || a->rstd.dtype != KPROP_F32)) return KPROP_ERROR;
  c.rows = static_cast<int>(a->x.shape[0]);
  c.dim = static_cast<int>(a->x.shape[1]);
  c.eps = a->eps;
  for (int r = 0; r < c.rows; ++r)
    for (int d = 0; d < c.dim; ++d)
      c.x.push_back(element(a->x, {r, d})), c.dy.push_back(element(a->dy, {r, d}));
  for (int d = 0; d < c.dim; ++d)
    c.gamma.push_back(element(a->gamma, {d})), c.beta.push_back(element(a->beta, {d}));
  const Result res = Impl(c);
  const size_t D = static_cast<size_t>(c.dim);
  for (int r = 0; r < c.rows; ++r) {
    for (int d = 0; d < c.dim; ++d) {
      const size_t at = static_cast<size_t>(r) * D + static_cast<size_t>(d);
      store(a->y, {r, d}, res.y[at]);
      store(a->xhat, {r, d}, res.xhat[at]);
      store(a->dx, {r, d}, res.dx[at]);
    }
    store(a->mean, {r}, res.mean[static_cast<size_t>(r)]);
    store(a->rstd, {r}, res.rstd[static_cast<size_t>(r)]);
  }
  for (int d = 0; d < c.dim; ++d) {
    store(a->dgamma, {d}, res.dgamma[static_cast<size_t>(d)]);
    store(a->dbeta, {d}, res.dbeta[static_cast<size_t>(d)]);
  }
  return KPROP_OK;
}

Result missing_proj_term(const Case& c) {
  return kprop::find_mutant(mutants(), "missing_proj_term").run(c);
}

// The invariant that killed the run with a counterexample, "" when none did.
using kprop::testing::killed_by;

kprop::RunReport run_entry(kprop_layernorm_fn fn) {
  return kprop::testing::run_in_process(kSpec, {{"kprop_layernorm", reinterpret_cast<void*>(fn)}},
                                        quick(true));
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
