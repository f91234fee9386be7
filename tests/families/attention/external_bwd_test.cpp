// attention.bwd as an external target (kprop_attention_bwd_args in
// include/kprop/abi/attention.h): kprop's tiled backward kernel behind the C
// ABI passes specs/attention_bwd.yaml in-process (the plugin binding), and so does
// the NumPy worker of examples/python/attention_bwd.py through exec: (the
// worker binding); planted bugs fail with a shrunk counterexample.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kprop/half.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "properties/attention/family.h"
#include "tests/support/python_worker.h"

namespace {

using namespace kprop::attention;

const std::string kSpec = KPROP_SOURCE_DIR "/specs/attention_bwd.yaml";

// `only`: check (and shrink) this invariant alone.
kprop::RunOptions quick(const std::string& target = "", const std::string& only = "") {
  kprop::RunOptions o;
  o.target = target;
  if (!only.empty()) o.only_invariants = {only};
  o.seed = 20261122;
  o.trials = 60;
  o.write_corpus = false;
  return o;
}

// ------------------------------------ the tiled backward behind the C ABI
bool contiguous(const kprop_tensor& t) {
  int64_t stride = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.strides[d] != stride) return false;
    stride *= t.shape[d];
  }
  return true;
}

template <typename T>
const T* in(const kprop_tensor& t) {
  return static_cast<const T*>(t.data);
}
template <typename T>
T* out(const kprop_tensor& t) {
  return static_cast<T*>(t.data);
}

// The call's shape, mask, scale and tiles; its tensors left for the caller.
template <typename T>
Inputs<T> inputs_but_tensors(const kprop_attention_bwd_args* a) {
  Inputs<T> i;
  i.shape = {static_cast<int>(a->q.shape[0]), static_cast<int>(a->q.shape[1]),
             static_cast<int>(a->k.shape[1]), static_cast<int>(a->q.shape[2]),
             static_cast<int>(a->k.shape[2]), static_cast<int>(a->q.shape[3])};
  // KPROP_MASK_* and MaskKind list the kinds in the same order.
  i.mask = {static_cast<MaskKind>(a->mask), i.shape.nk - i.shape.nq, in<int32_t>(a->key_lengths),
            in<uint8_t>(a->allowed)};
  i.scale = static_cast<T>(a->scale);
  i.block_q = a->block_q;
  i.block_k = a->block_k;
  return i;
}

template <typename T, BwdBug bug>
void run_tiled(const kprop_attention_bwd_args* a) {
  Inputs<T> i = inputs_but_tensors<T>(a);
  i.q = in<T>(a->q);
  i.k = in<T>(a->k);
  i.v = in<T>(a->v);
  i.d_out = in<T>(a->d_out);
  Workspace ws;
  tiled_backward<T, BwdMode::single_pass_d, bug>(
      i, in<T>(a->o), in<T>(a->lse), {out<T>(a->dq), out<T>(a->dk), out<T>(a->dv), out<T>(a->d)}, ws);
}

// f16/bf16 cases: the float kernel with half-precision storage, on float
// copies of the half tensors (exact) written back to them (exact too: the
// kernel rounds what it stores). LSE and D are f32 tensors then.
size_t count(const kprop_tensor& t) {
  size_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= size_t(t.shape[d]);
  return n;
}
std::vector<float> widened(const kprop_tensor& t) {
  const auto* h = static_cast<const uint16_t*>(t.data);
  std::vector<float> x(count(t));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = t.dtype == KPROP_F16 ? kprop::half::f16_to_float(h[i]) : kprop::half::bf16_to_float(h[i]);
  return x;
}
void narrow_into(const std::vector<float>& x, const kprop_tensor& t) {
  auto* h = static_cast<uint16_t*>(t.data);
  for (size_t i = 0; i < x.size(); ++i)
    h[i] = t.dtype == KPROP_F16 ? kprop::half::f16_from_float(x[i]) : kprop::half::bf16_from_float(x[i]);
}

template <BwdBug bug>
void run_tiled_half(const kprop_attention_bwd_args* a) {
  const std::vector<float> q = widened(a->q), k = widened(a->k), v = widened(a->v), o = widened(a->o),
                           d_out = widened(a->d_out);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  Inputs<float> i = inputs_but_tensors<float>(a);
  i.store = a->q.dtype == KPROP_F16 ? Storage::f16 : Storage::bf16;
  i.q = q.data();
  i.k = k.data();
  i.v = v.data();
  i.d_out = d_out.data();
  Workspace ws;
  tiled_backward<float, BwdMode::single_pass_d, bug>(i, o.data(), in<float>(a->lse),
                                                     {dq.data(), dk.data(), dv.data(), out<float>(a->d)}, ws);
  narrow_into(dq, a->dq);
  narrow_into(dk, a->dk);
  narrow_into(dv, a->dv);
}

template <BwdBug bug>
int tiled_entry(const kprop_attention_bwd_args* a, char* error, size_t size) {
  for (const kprop_tensor* t :
       {&a->q, &a->k, &a->v, &a->o, &a->lse, &a->d_out, &a->d, &a->dq, &a->dk, &a->dv})
    if (!contiguous(*t)) {
      std::snprintf(error, size, "this wrapper takes contiguous tensors only");
      return KPROP_ERROR;
    }
  if (a->q.dtype == KPROP_F16 || a->q.dtype == KPROP_BF16)
    run_tiled_half<bug>(a);
  else if (a->q.dtype == KPROP_F32)
    run_tiled<float, bug>(a);
  else
    run_tiled<double, bug>(a);
  return KPROP_OK;
}

// The counterexample of `invariant`, checked to be shrunk to at most
// `max_size` (B·Hq·Nq·Nk·D).
void expect_shrunk(const kprop::RunReport& report, const std::string& invariant, int64_t max_size,
                   const std::string& what) {
  EXPECT_EQ(report.status, kprop::RunStatus::failed) << what;
  for (const auto& inv : report.invariants) {
    if (inv.name != invariant) continue;
    ASSERT_EQ(inv.status, kprop::InvariantStatus::failed) << what << ": " << invariant;
    ASSERT_TRUE(inv.counterexample) << what;
    const kprop::Counterexample& cx = *inv.counterexample;
    EXPECT_LE(cx.stats.size, max_size) << what << ": " << cx.stats.summary << "\n" << cx.case_yaml;
    EXPECT_LE(cx.stats.size, cx.original_size) << what;
    EXPECT_FALSE(cx.case_yaml.empty()) << what;
    return;
  }
  ADD_FAILURE() << what << ": no invariant " << invariant << " in the report";
}

TEST(AttentionBwdExternal, TiledKernelBehindTheAbiPassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(
      kSpec, {{"kprop_attention_bwd", reinterpret_cast<void*>(&tiled_entry<BwdBug::none>)}}, quick());
}

TEST(AttentionBwdExternal, PlantedBugFailsInProcess) {
  const kprop::RunReport report = kprop::testing::run_in_process(
      kSpec, {{"kprop_attention_bwd", reinterpret_cast<void*>(&tiled_entry<BwdBug::masked_row_nan>)}},
      quick("", "masked_rows_zero"));
  expect_shrunk(report, "masked_rows_zero", 1, "in-process masked_row_nan");
}

// -------------------------------------------------- the NumPy worker, exec:
std::string worker(const std::string& args = "") {
  return kprop_test::python_worker("attention_bwd.py", args);
}

kprop::RunReport run_worker(const std::string& target, const std::string& only = "") {
  return kprop::run_spec(kprop::load_spec(kSpec), quick(target, only));
}

TEST(AttentionBwdExternal, NumpyWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  const kprop::RunReport report = run_worker(worker());
  EXPECT_TRUE(kprop::testing::spec_passes(report));
  // Only the Workspace is out of an external kernel's reach.
  for (const auto& inv : report.invariants)
    EXPECT_EQ(inv.status == kprop::InvariantStatus::not_applicable, inv.name == "workspace_bounded")
        << inv.name;
}

TEST(AttentionBwdExternal, NumpyWorkerBugsFailShrunk) {
  KPROP_REQUIRE_PYTHON();
  // One query, two keys: the smallest case where summing over the wrong axis differs.
  expect_shrunk(run_worker(worker(" --bug dsoftmax_wrong_axis"), "matches_reference"), "matches_reference", 2,
                "dsoftmax_wrong_axis");
  // One fully masked 1x1 row.
  expect_shrunk(run_worker(worker(" --bug masked_row_nan"), "masked_rows_zero"), "masked_rows_zero", 1,
                "masked_row_nan");
}

}  // namespace
