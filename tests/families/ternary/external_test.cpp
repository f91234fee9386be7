// ternary through the C ABI (include/kprop/abi/ternary.h): the family's own
// packed kernel behind the two entry points, linked into this test, passes
// specs/ternary.yaml, and the same kernel reading the packed codes in the
// wrong order within a byte does not; the NumPy worker
// (examples/python/ternary_matmul.py) passes, and each bug it can plant is caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/ternary/packed.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "tests/support/abi_entry.h"
#include "tests/support/python_worker.h"

namespace {

using namespace kprop::testing;  // quick, has_counterexample (abi_entry.h)

namespace kernel = kprop::ternary::kernel;

const char* const kSpec = KPROP_SOURCE_DIR "/specs/ternary.yaml";

template <typename T>
T& at(const kprop_tensor& t, int64_t i, int64_t j) {
  const int64_t index[2] = {i, j};
  return static_cast<T*>(t.data)[kprop_offset(&t, index)];
}

// A rows x cols view as a dense row-major vector.
template <typename T>
std::vector<T> read(const kprop_tensor& t) {
  std::vector<T> out;
  for (int64_t i = 0; i < t.shape[0]; ++i)
    for (int64_t j = 0; j < t.shape[1]; ++j) out.push_back(at<T>(t, i, j));
  return out;
}

template <typename T, typename U>
void write(const kprop_tensor& t, const U* values) {
  for (int64_t i = 0; i < t.shape[0]; ++i)
    for (int64_t j = 0; j < t.shape[1]; ++j) at<T>(t, i, j) = static_cast<T>(*values++);
}

// kPadWithOnes plants a layout bug: the codes past K in a row's last byte
// are 01 (+1) instead of the documented 00 (invisible to w_q).
template <bool kPadWithOnes>
int packed_quantize_weights(const kprop_ternary_quantize_weights_args* a, char*, size_t) {
  const std::vector<double> w = read<double>(a->w);
  const int N = static_cast<int>(a->w.shape[0]), K = static_cast<int>(a->w.shape[1]);
  auto p = kernel::quantize_and_pack(w.data(), N, K, kernel::Packing::two_bit);
  const int row_bytes = static_cast<int>(a->w_packed.shape[1]);
  if (kPadWithOnes && K % 4 != 0)
    for (int n = 0; n < N; ++n)
      for (int k = K % 4; k < 4; ++k) p.bytes[static_cast<size_t>((n + 1) * row_bytes - 1)] |= 1 << (2 * k);
  write<uint8_t>(a->w_packed, p.bytes.data());
  static_cast<double*>(a->w_scale.data)[0] = p.scale;
  return KPROP_OK;
}

// kMsbFirst plants an integration bug: the kernel takes the first weight of
// a byte from its most significant bits, the opposite of the documented layout.
template <bool kMsbFirst>
int packed_linear(const kprop_ternary_linear_args* a, char*, size_t) {
  const int M = static_cast<int>(a->x.shape[0]), K = static_cast<int>(a->x.shape[1]);
  const int N = static_cast<int>(a->w_packed.shape[0]);
  kernel::PackedWeights w;
  w.rows = N;
  w.cols = K;
  w.row_bytes = static_cast<int>(a->w_packed.shape[1]);
  w.scale = static_cast<const double*>(a->w_scale.data)[0];
  w.bytes = read<uint8_t>(a->w_packed);
  if (kMsbFirst)
    for (uint8_t& byte : w.bytes)
      byte = static_cast<uint8_t>((byte & 3) << 6 | (byte & 12) << 2 | (byte & 48) >> 2 | (byte & 192) >> 6);
  const std::vector<double> x = read<double>(a->x), dy = read<double>(a->dy);
  const kernel::QuantizedActivations xq = kernel::quantize_activations(x.data(), M, K);
  std::vector<int32_t> acc(static_cast<size_t>(M) * N);
  std::vector<float> y(acc.size()), dy32(dy.begin(), dy.end()), dx(static_cast<size_t>(M) * K),
      dw(static_cast<size_t>(N) * K);
  kernel::matmul_int(xq, w, acc.data());
  kernel::dequantize(xq, w, acc.data(), y.data());
  kernel::backward(xq, w, dy32.data(), dx.data(), dw.data());
  for (int t = 0; t < M; ++t) {
    static_cast<double*>(a->x_scale.data)[t * a->x_scale.strides[0]] = xq.scale[static_cast<size_t>(t)];
    for (int k = 0; k < K; ++k) at<int8_t>(a->x_q, t, k) = xq.q[static_cast<size_t>(t * xq.stride + k)];
  }
  write<int32_t>(a->acc, acc.data());
  write<float>(a->y, y.data());
  write<float>(a->dx, dx.data());
  write<float>(a->dw, dw.data());
  return KPROP_OK;
}

kprop::testing::EntryPoints packed_kernel(bool msb_first, bool pad_with_ones = false) {
  return {{"kprop_ternary_quantize_weights", pad_with_ones
                                                 ? reinterpret_cast<void*>(&packed_quantize_weights<true>)
                                                 : reinterpret_cast<void*>(&packed_quantize_weights<false>)},
          {"kprop_ternary_linear", msb_first ? reinterpret_cast<void*>(&packed_linear<true>)
                                             : reinterpret_cast<void*>(&packed_linear<false>)}};
}

TEST(TernaryExternal, PackedKernelPassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(kSpec, packed_kernel(false), quick(false, 200));
}

TEST(TernaryExternal, CodeOrderSwappedFailsInProcess) {
  const auto report = kprop::testing::run_in_process(kSpec, packed_kernel(true), quick(false, 200));
  EXPECT_EQ(report.status, kprop::RunStatus::failed);
  EXPECT_TRUE(has_counterexample(report));
}

TEST(TernaryExternal, PaddingCodesOtherThanZeroFailInProcess) {
  const auto report = kprop::testing::run_in_process(kSpec, packed_kernel(false, true), quick(false, 200));
  ASSERT_EQ(report.status, kprop::RunStatus::failed);
  const auto* f =
      report.invariants.front().counterexample ? &*report.invariants.front().counterexample : nullptr;
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->invariant, "weights_ternary");
  EXPECT_NE(f->message.find("codes other than 00 past K"), std::string::npos) << f->message;
}

// The NumPy worker through the exec: protocol.
kprop::RunReport run_worker(const std::string& flags, kprop::RunOptions options) {
  options.target = kprop_test::python_worker("ternary_matmul.py", flags);
  return kprop::run_spec(kprop::load_spec(kSpec), options);
}

TEST(TernaryExternal, PythonWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  const auto report = run_worker("", quick(false, 200));
  EXPECT_TRUE(kprop::testing::spec_passes(report));
  EXPECT_EQ(report.status, kprop::RunStatus::passed) << report.detail;  // not skipped
}

TEST(TernaryExternal, PythonWorkerBugsFail) {
  KPROP_REQUIRE_PYTHON();
  for (const char* bug :
       {"scale_absmax", "round_toward_zero", "ste_zero_grad", "no_eps", "round_half_away"}) {
    kprop::RunOptions o = quick(false, 200);
    o.stop_on_first_failure = true;
    const auto report = run_worker(std::string("--bug ") + bug, o);
    EXPECT_EQ(report.status, kprop::RunStatus::failed) << bug;
    EXPECT_TRUE(has_counterexample(report)) << bug;
  }
}

}  // namespace
