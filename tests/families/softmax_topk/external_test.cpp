// softmax_topk as an external target (include/kprop/abi/softmax_topk.h):
// kprop's own fused kernel behind the C ABI passes specs/softmax_topk.yaml
// in-process, and so does the NumPy worker of examples/python/softmax_topk.py
// through exec:; a planted bug fails either way with a counterexample. The
// committed spec draws f16, bf16, f32 and f64 cases, so each run reaches half
// cases through the ABI (KPROP_F16 / KPROP_BF16 logits and probabilities).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kprop/half.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "properties/softmax_topk/family.h"
#include "tests/support/abi_entry.h"
#include "tests/support/python_worker.h"
#include "tests/support/temp_dir.h"

namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace external {

using namespace kprop::softmax_topk;
using namespace kprop::testing;  // element, store, quick (abi_entry.h)

const std::string kSpec = KPROP_SOURCE_DIR "/specs/softmax_topk.yaml";

// ---------------------------------------- an ABI entry point around a Result
// Offset of element (row, col) of a 2-D view, through its strides.
int64_t offset(const kprop_tensor& t, int64_t row, int64_t col) {
  const int64_t index[2] = {row, col};
  return kprop_offset(&t, index);
}

// Runs `Impl` (an implementation of kprop's family) on the views.
template <Result (*Impl)(const Case&)>
int entry(const kprop_softmax_topk_args* a, char*, size_t) {
  const int64_t rows = a->logits.shape[0];
  Case c;
  switch (a->logits.dtype) {
    case KPROP_F32:
      c.dtype = DType::f32;
      break;
    case KPROP_F16:
      c.dtype = DType::f16;
      break;
    case KPROP_BF16:
      c.dtype = DType::bf16;
      break;
    default:
      c.dtype = DType::f64;
  }
  c.vocab = static_cast<int>(a->logits.shape[1]);
  c.k = a->k;
  c.block = a->block;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < c.vocab; ++i) {
      c.logits.push_back(element(a->logits, {r, i}));
    }
  const Result res = Impl(c);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c.k; ++j) {
      const size_t slot = static_cast<size_t>(r * c.k + j);
      store(a->probs, {r, j}, res.probs[slot]);
      static_cast<int32_t*>(a->indices.data)[offset(a->indices, r, j)] = res.indices[slot];
    }
  return KPROP_OK;
}

Result tie_high_index(const Case& c) {
  return kprop::find_mutant(mutants(), "tie_high_index").run(c);
}

// A near-tie width of 2^20 f32 ulps (1/8 of the logit scale) makes a
// near-tie in the first two slots common in f32 cases (the test spec below).
constexpr double kWideTieUlps = 1048576;

// Right except in a row whose first two slots hold near-tied logits: there
// it swaps them (an order a kernel's rounding may give) and puts the row's
// smallest logit, well below, in the last slot (wrong). matches_reference
// discarded the case at the near-tie in slot 0 and never reached the last
// slot: the kernel passed.
Result tie_hides_a_wrong_index(const Case& c) {
  Result r = reference(c);
  if (c.k < 3 || c.vocab <= c.k || c.dtype != DType::f32) return r;
  auto x = [&](int row, int i) { return c.logits[static_cast<size_t>(row) * c.vocab + i]; };
  for (int row = 0; row < c.rows(); ++row) {
    const size_t s = static_cast<size_t>(row) * c.k;
    const int a = r.indices[s], b = r.indices[s + 1], last = r.indices[s + c.k - 1];
    const double width = kWideTieUlps * 0x1p-23 * std::max(1.0, std::fabs(x(row, a) - x(row, b)));
    if (!std::isfinite(x(row, b)) || x(row, a) == x(row, b) || x(row, a) - x(row, b) > width / 2) continue;
    int smallest = 0;
    for (int i = 1; i < c.vocab; ++i)
      if (x(row, i) < x(row, smallest)) smallest = i;
    // Not near-tied with the last slot's own logit either: its gap past a
    // quarter of the scale there (the width is an eighth).
    const double gap = x(row, last) - x(row, smallest), scale = std::max(1.0, x(row, a) - x(row, smallest));
    if (!(gap > scale / 4)) continue;
    std::swap(r.indices[s], r.indices[s + 1]);
    std::swap(r.probs[s], r.probs[s + 1]);
    r.indices[s + c.k - 1] = smallest;
  }
  return r;
}

TEST(SoftmaxTopkExternal, ANearTieHidesNoWrongIndexInALaterSlot) {
  const kprop::testing::TempDir dir;
  std::filesystem::create_directories(dir.path);
  std::ifstream in(kSpec);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string dtypes = "dtypes: [f16, bf16, f32, f64]", use = "  - matches_reference\n";
  ASSERT_NE(text.find(dtypes), std::string::npos);
  ASSERT_NE(text.find(use), std::string::npos);
  text.replace(text.find(dtypes), dtypes.size(), "dtypes: [f32]");
  text.replace(text.find(use), use.size(),
               fmt::format("  - {{name: matches_reference, tie_ulps: {}}}\n", kWideTieUlps));
  const std::string spec = (dir.path / "softmax_topk.yaml").string();
  std::ofstream(spec) << text;
  kprop::RunOptions o = quick(true, 400);
  o.only_invariants = {"matches_reference"};
  const kprop::RunReport report = kprop::testing::run_in_process(
      spec, {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<tie_hides_a_wrong_index>)}}, o);
  EXPECT_EQ(report.status, kprop::RunStatus::failed) << report.detail;
  EXPECT_EQ(killed_by(report), "matches_reference");
}

// The invariant that killed the run with a counterexample, "" when none did.
using kprop::testing::killed_by;

// The fused kernel as a plugin that ignores its strides: it reads and
// writes every 2-D view as if it were contiguous [rows][cols].
int ignores_strides(const kprop_softmax_topk_args* a, char* error, size_t error_size) {
  kprop_softmax_topk_args b = *a;
  for (kprop_tensor* t : {&b.logits, &b.probs, &b.indices}) t->strides[0] = t->shape[1], t->strides[1] = 1;
  return entry<fused>(&b, error, error_size);
}

TEST(SoftmaxTopkExternal, PaddedTensorsCatchAKernelThatIgnoresItsStrides) {
  // run.padded_tensors in the spec: the in-process entry points get padded
  // rows too. On contiguous tensors the two kernels are the same; padded,
  // the one that indexes through its strides passes and the other writes
  // into an output's padding, which fails the call.
  const kprop::testing::TempDir dir;
  std::filesystem::create_directories(dir.path);
  std::ifstream in(kSpec);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(text.find("\nrun: {"), std::string::npos);
  const std::string unpadded = (dir.path / "unpadded.yaml").string();
  std::ofstream(unpadded) << text;
  text.replace(text.find("\nrun: {"), 7, "\nrun: {padded_tensors: true, ");
  const std::string padded = (dir.path / "softmax_topk.yaml").string();
  std::ofstream(padded) << text;
  const kprop::testing::EntryPoints strided = {{"kprop_softmax_topk",
                                                reinterpret_cast<void*>(&entry<fused>)}},
                                    contiguous = {
                                        {"kprop_softmax_topk", reinterpret_cast<void*>(&ignores_strides)}};
  EXPECT_EQ(run_in_process(unpadded, contiguous, quick()).status, kprop::RunStatus::passed);
  EXPECT_EQ(run_in_process(padded, strided, quick()).status, kprop::RunStatus::passed);
  const kprop::RunReport report = run_in_process(padded, contiguous, quick(true));
  EXPECT_EQ(report.status, kprop::RunStatus::crashed) << report.detail;
  EXPECT_NE(report.detail.find("wrote into the padding after row"), std::string::npos) << report.detail;
}

TEST(SoftmaxTopkExternal, FusedBehindTheAbiPassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(kSpec, {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<fused>)}}, quick());
}

// The pass line of a test binary gives the counts, as prop_runner's
// "cases:" line does: a pass with half its cases declined is not all checked.
TEST(SoftmaxTopkExternal, AnInProcessPassSaysWhatWasChecked) {
  ::testing::internal::CaptureStderr();
  const kprop::RunReport r =
      run_in_process(kSpec, {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<fused>)}}, quick());
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(r.status, kprop::RunStatus::passed) << r.detail;
  EXPECT_NE(said.find(fmt::format(": passed ({} drawn, {} checked", r.trials, r.checked)), std::string::npos)
      << said;
}

TEST(SoftmaxTopkExternal, PlantedBugFailsInProcess) {
  const kprop::RunReport report = kprop::testing::run_in_process(
      kSpec, {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<tie_high_index>)}}, quick(true));
  EXPECT_EQ(report.status, kprop::RunStatus::failed);
  EXPECT_NE(killed_by(report), "");
}

// A kernel linked into a test binary has no prop_runner replay (it printed
// `--target in-process`, which prop_runner does not know): its finding's
// replay is the test, run again with KPROP_REPLAY, which checks the stored
// case on the kernel as prop_runner --replay does.
TEST(SoftmaxTopkExternal, AnInProcessFindingReplaysThroughTheTestBinary) {
  const EntryPoints bug = {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<tie_high_index>)}};
  const kprop::RunReport report = run_in_process(kSpec, bug, quick(true));
  ASSERT_TRUE(has_counterexample(report));
  const kprop::Finding* f = nullptr;
  for (const auto& inv : report.invariants)
    if (inv.counterexample) f = &*inv.counterexample;
  ASSERT_FALSE(f->corpus_path.empty());
  EXPECT_EQ(f->replay_command.rfind("KPROP_REPLAY=" + kprop::shell_quote(f->corpus_path) + " ", 0), 0u)
      << f->replay_command;
  EXPECT_NE(f->replay_command.find(
                " --gtest_filter=SoftmaxTopkExternal.AnInProcessFindingReplaysThroughTheTestBinary"),
            std::string::npos)
      << f->replay_command;
  ::setenv("KPROP_REPLAY", f->corpus_path.c_str(), 1);
  const kprop::RunReport again = run_in_process(kSpec, bug, quick(true));
  const kprop::RunReport fixed =
      run_in_process(kSpec, {{"kprop_softmax_topk", reinterpret_cast<void*>(&entry<fused>)}}, quick());
  ::unsetenv("KPROP_REPLAY");
  EXPECT_EQ(again.status, kprop::RunStatus::failed) << again.detail;
  EXPECT_NE(again.detail.find(f->corpus_path), std::string::npos) << again.detail;
  // The assertion's message is the replay's, not a run report's "0 cases
  // drawn ... 0 of 0 invariants broken".
  const std::string said = kprop::testing::spec_passes(again).message();
  EXPECT_EQ(said, again.detail);
  EXPECT_EQ(said.find("0 drawn"), std::string::npos) << said;
  EXPECT_EQ(fixed.status, kprop::RunStatus::passed) << fixed.detail;
  std::filesystem::remove(f->corpus_path);
}

// -------------------------------------------------- the NumPy worker, exec:
TEST(SoftmaxTopkExternal, NumpyWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  EXPECT_TRUE(
      kprop::testing::spec_passes(kprop_test::run_python_worker(kSpec, "softmax_topk.py", "", quick())));
}

// A reference given with --reference is the oracle of the probabilities
// too, not only of the ranking: a worker with the right top-k and
// probabilities 1.5x fails a correct target. (matches_reference compared
// the target with kprop's own softmax, and this reference passed.)
TEST(SoftmaxTopkExternal, AGivenReferenceIsTheOracleOfTheProbabilities) {
  KPROP_REQUIRE_PYTHON();
  kprop::RunOptions o = quick();
  o.target = "fused";
  o.reference = kprop_test::python_worker("softmax_topk.py", "--bug probs_scaled");
  o.only_invariants = {"matches_reference"};
  const kprop::RunReport report = kprop::run_spec(kprop::load_spec(kSpec), o);
  EXPECT_EQ(report.status, kprop::RunStatus::failed) << report.detail;
  EXPECT_EQ(killed_by(report), "matches_reference");
}

TEST(SoftmaxTopkExternal, NumpyWorkerBugsFail) {
  KPROP_REQUIRE_PYTHON();
  kprop_test::expect_planted_bugs_caught(
      kSpec, "softmax_topk.py", {"tie_high_index", "neg_inf_selected_early", "unsorted_output"}, quick());
}

}  // namespace external
}  // namespace
