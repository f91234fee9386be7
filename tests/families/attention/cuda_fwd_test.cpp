// The CUDA attention forward's tensor-core f16/bf16 kernels (mma.sync, every
// tiling; wgmma where the sm_90a image runs) match the fp64 reference
// (kprop::attention::reference_forward) within a tolerance derived below.
// Everything that needs a device GTEST_SKIPs without one. The "cuda"
// implementation of attention.fwd (f32/f64) is checked with every other
// `cuda` target in tests/specs/cuda_target_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "tests/support/cuda.h"
#if KPROP_HAVE_CUDA
#include "kernels/attention/attention_cuda.h"
#include "tests/families/attention/tc_case.h"
#endif

namespace kprop::attention {
namespace {

#if KPROP_HAVE_CUDA
// ---------------------------------------------------------------- tensor cores
struct TcCase {
  int batch, heads_q, heads_kv, nq, nk, dim;
  cuda_raw::TcMask mask;
  std::vector<int> key_lengths;
  bool growing_keys = false;  // scores rise along the keys (the max moves up tile after tile)
};

struct TcErrors {
  double o_ratio = 0, lse_ratio = 0;  // max |error| / tolerance
  size_t nan = 0, masked_rows = 0, masked_rows_wrong = 0;
};

// Inputs: q ~ U[-2, 2], k, v ~ U[-1, 1], rounded to the type (so the fp64
// reference sees exactly the kernel's inputs).
//
// Tolerance, from the kernel's arithmetic (u = 2^-11 for f16, 2^-8 for bf16;
// e = 2^-24 for f32; A = scale·D·max|q|·max|k| bounds every |S|, N = Nk):
//  - S = Q·Kᵀ accumulates D products in f32 and is multiplied by
//    fl32(scale·log2 e): exponent error <= A·(D + 3)·e (natural units), so
//    each P_ij is off by a factor exp(±A(D+3)e); O moves by at most
//    2·A·(D + 3)·e·max|V| and LSE by A·(D + 3)·e;
//  - exp2f: 2 ulp, 2^-22 = 4e relative on each P (O: 8e·max|V|, LSE: 4e);
//  - P is rounded to the type for P·V: relative u per element (O: u·max|V|;
//    the row sum l uses the unrounded f32 P), plus an absolute 2^-25 per
//    element where P falls into f16's subnormals (O: N·2^-25·max|V|, l >= 1);
//  - l and P·V accumulate <= N terms in f32 plus one rescale per tile:
//    O: 2(N + N/64 + 2)·e·max|V|; LSE: (N + N/64)·e from l;
//  - O = acc·(1/l), then rounded to the type: 2e + u relative;
//    LSE = m·ln 2 + logf(l): (|m| + ln N + 2)·2e.
// So |ΔO| <= max|V|·(2u + e·(2A(D+3) + 2.6N + 20)) and
// |ΔLSE| <= e·(A(D+3) + 1.1N + 2A + 2 ln N + 12); first-order bounds, a
// factor 2 would only hide a real bug (a wrong rescale is off by O(1)).
TcErrors run_tc(cuda_raw::Half type, const TcCase& tc, uint32_t seed, int warps = 0, int rows_per_warp = 0,
                bool planted_bug = false, cuda_raw::TcKernel kernel = cuda_raw::TcKernel::mma_sync,
                int ws_block_k = 0, bool ws_pingpong = true) {
  Case c = tc_case(tc);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u1(-1.f, 1.f);
  auto rounded = [&](float x) { return double(cuda_raw::round_half(type, x)); };
  for (size_t i = 0; i < c.shape.q_size(); ++i) c.q.push_back(rounded(2 * u1(rng)));
  for (size_t i = 0; i < c.shape.kv_size(); ++i) {
    const size_t j = (i / size_t(tc.dim)) % size_t(tc.nk);
    const float grow = tc.growing_keys ? 0.5f + 2.f * float(j) / float(tc.nk) : 0.f;
    c.k.push_back(rounded(tc.growing_keys ? grow : u1(rng)));
    c.v.push_back(rounded(u1(rng)));
  }
  if (tc.growing_keys)
    for (double& x : c.q) x = std::fabs(x);
  const FwdResult ref = reference_forward(c);

  const std::vector<float> q(c.q.begin(), c.q.end()), k(c.k.begin(), c.k.end()), v(c.v.begin(), c.v.end());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> o(q.size(), nan), lse(c.shape.rows(), nan);  // poisoned (the device buffers are too)
  cuda_raw::tc_forward_host(type, tc.batch, tc.heads_q, tc.heads_kv, tc.nq, tc.nk, tc.dim, tc.mask,
                            tc.key_lengths.empty() ? nullptr : tc.key_lengths.data(), 0.f, q.data(), k.data(),
                            v.data(), o.data(), lse.data(), warps, rows_per_warp, planted_bug, kernel,
                            ws_block_k, ws_pingpong);

  const double e = std::ldexp(1.0, -24), uu = std::ldexp(1.0, type == cuda_raw::Half::f16 ? -11 : -8);
  double qmax = 0, kmax = 0, vmax = 0;
  for (double x : c.q) qmax = std::max(qmax, std::fabs(x));
  for (double x : c.k) kmax = std::max(kmax, std::fabs(x));
  for (double x : c.v) vmax = std::max(vmax, std::fabs(x));
  const double D = tc.dim, N = tc.nk, A = effective_scale(c) * D * qmax * kmax;
  const double tol_o = vmax * (2 * uu + e * (2 * A * (D + 3) + 2.6 * N + 20));
  const double tol_lse = e * (A * (D + 3) + 1.1 * N + 2 * A + 2 * std::log(N) + 12);

  TcErrors r;
  for (size_t i = 0; i < o.size(); ++i) {
    if (std::isnan(o[i])) ++r.nan;
    r.o_ratio = std::max(r.o_ratio, std::fabs(o[i] - ref.o[i]) / tol_o);
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isnan(lse[i])) ++r.nan;
    if (std::isinf(ref.lse[i])) {  // a fully masked row: O = 0 exactly, LSE = -inf
      ++r.masked_rows;
      bool ok = lse[i] == -std::numeric_limits<float>::infinity();
      for (int d = 0; d < tc.dim; ++d) ok = ok && o[i * size_t(tc.dim) + size_t(d)] == 0.f;
      if (!ok) ++r.masked_rows_wrong;
      continue;
    }
    r.lse_ratio = std::max(r.lse_ratio, std::fabs(lse[i] - ref.lse[i]) / tol_lse);
  }
  if (std::isnan(r.o_ratio)) r.o_ratio = std::numeric_limits<double>::infinity();
  if (std::isnan(r.lse_ratio)) r.lse_ratio = std::numeric_limits<double>::infinity();
  return r;
}

using cuda_raw::TcMask;

// KPROP_TC_MAX_CASES=N keeps the first N (scripts/gpu_check.sh: racecheck
// is slow on the larger ones).
std::vector<TcCase> tc_cases() {
  std::vector<TcCase> cases = {
      {1, 2, 2, 200, 200, 64, TcMask::none, {}},                   // N not a multiple of Bq or Bk
      {2, 4, 2, 128, 128, 128, TcMask::none, {}},                  // GQA, group 2
      {1, 6, 2, 77, 333, 128, TcMask::none, {}},                   // GQA, group 3, Nq != Nk
      {1, 3, 1, 100, 300, 128, TcMask::causal, {}},                // causal, Nq < Nk
      {1, 2, 2, 300, 100, 64, TcMask::causal, {}},                 // causal, Nq > Nk: 200 empty rows
      {2, 2, 2, 129, 129, 64, TcMask::causal, {}},                 // causal, square, one row past a tile
      {3, 2, 1, 65, 130, 128, TcMask::key_padding, {0, 77, 130}},  // an empty batch, a partial tile
      {1, 1, 1, 1, 1, 64, TcMask::none, {}},                       // one query, one key
      {1, 2, 1, 256, 1000, 128, TcMask::causal, {}, true},         // a rising max over 16 tiles
  };
  if (const char* max = std::getenv("KPROP_TC_MAX_CASES"))
    cases.resize(std::min(cases.size(), static_cast<size_t>(std::max(1, std::atoi(max)))));
  return cases;
}

std::string describe(cuda_raw::Half type, const TcCase& tc, const std::string& kernel) {
  return std::string(type == cuda_raw::Half::f16 ? "f16" : "bf16") + " B=" + std::to_string(tc.batch) +
         " Hq=" + std::to_string(tc.heads_q) + " Hkv=" + std::to_string(tc.heads_kv) +
         " Nq=" + std::to_string(tc.nq) + " Nk=" + std::to_string(tc.nk) + " D=" + std::to_string(tc.dim) +
         " mask " + std::to_string(int(tc.mask)) + " " + kernel;
}

void expect_within(const TcErrors& r, const std::string& what) {
  EXPECT_EQ(r.nan, 0u) << what;
  EXPECT_LE(r.o_ratio, 1.0) << what;
  EXPECT_LE(r.lse_ratio, 1.0) << what;
  EXPECT_EQ(r.masked_rows_wrong, 0u) << what;
  std::printf("[ tc ] %-64s O err/tol %.3f  LSE err/tol %.3f  empty rows %zu\n", what.c_str(), r.o_ratio,
              r.lse_ratio, r.masked_rows);
}

TEST(AttentionCudaTensorCore, MatchesTheFp64Reference) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  // Every mma.sync tiling: 4 or 8 warps of 16 rows, and 4 warps of 32 rows.
  const int tilings[][2] = {{4, 16}, {8, 16}, {4, 32}};
  uint32_t seed = 100;
  for (cuda_raw::Half type : {cuda_raw::Half::f16, cuda_raw::Half::bf16})
    for (const TcCase& tc : tc_cases())
      for (const auto& tiling : tilings)
        expect_within(
            run_tc(type, tc, ++seed, tiling[0], tiling[1]),
            describe(type, tc, "mma.sync " + std::to_string(tiling[0]) + "x" + std::to_string(tiling[1])));
}

TEST(AttentionCudaTensorCore, WgmmaMatchesTheFp64Reference) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  if (!cuda_raw::tc_wgmma_available()) GTEST_SKIP() << "no sm_90a image for this device";
  uint32_t seed = 500;
  for (cuda_raw::Half type : {cuda_raw::Half::f16, cuda_raw::Half::bf16})
    for (const TcCase& tc : tc_cases())
      expect_within(run_tc(type, tc, ++seed, 0, 0, false, cuda_raw::TcKernel::wgmma),
                    describe(type, tc, "wgmma"));
}

TEST(AttentionCudaTensorCore, WarpSpecializedMatchesTheFp64Reference) {
  // Every variant of the TMA + warp-specialized kernel: 64 or 128 keys per
  // tile, the consumers' GEMMs in turns (ping-pong) or free.
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  if (!cuda_raw::tc_wgmma_available()) GTEST_SKIP() << "no sm_90a image for this device";
  uint32_t seed = 900;
  for (int block_k : {64, 128})
    for (bool pingpong : {false, true})
      for (cuda_raw::Half type : {cuda_raw::Half::f16, cuda_raw::Half::bf16})
        for (const TcCase& tc : tc_cases())
          expect_within(
              run_tc(type, tc, ++seed, 0, 0, false, cuda_raw::TcKernel::wgmma_ws, block_k, pingpong),
              describe(type, tc, "wgmma_ws Bk " + std::to_string(block_k) + (pingpong ? " ping-pong" : "")));
}

TEST(AttentionCudaTensorCore, EmptyRowsAreCounted) {
  // The masked-row check above must see rows: causal Nq > Nk and key length 0.
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  EXPECT_EQ(run_tc(cuda_raw::Half::f16, {1, 2, 2, 300, 100, 64, TcMask::causal, {}}, 7).masked_rows,
            2u * 200u);
  EXPECT_EQ(run_tc(cuda_raw::Half::bf16, {2, 1, 1, 64, 64, 64, TcMask::key_padding, {0, 5}}, 8).masked_rows,
            64u);
}

TEST(AttentionCudaTensorCore, CatchesAnInvertedRescale) {
  // The same check on the kernel with the running-max correction inverted
  // (a planted bug compiled into one instantiation) must fail.
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  const TcCase tc{1, 2, 2, 128, 256, 64, TcMask::none, {}, true};
  const TcErrors good = run_tc(cuda_raw::Half::f16, tc, 3);
  EXPECT_LE(good.o_ratio, 1.0);
  EXPECT_LE(good.lse_ratio, 1.0);
  const TcErrors bad = run_tc(cuda_raw::Half::f16, tc, 3, 4, 16, true);
  EXPECT_GT(std::max(bad.o_ratio, bad.lse_ratio), 1.0);
  std::printf("[ tc ] planted bug: O err/tol %.3g  LSE err/tol %.3g (correct kernel: %.3f, %.3f)\n",
              bad.o_ratio, bad.lse_ratio, good.o_ratio, good.lse_ratio);
}

TEST(AttentionCudaTensorCore, RejectsUnsupportedShapes) {
  cuda_raw::TcParams p;
  p.dim = 96;
  const char* why = nullptr;
  EXPECT_FALSE(cuda_raw::tc_supported(p, &why));
  EXPECT_STREQ(why, "head dimension must be 64 or 128");
  p.dim = 64, p.heads_q = 3, p.heads_kv = 2;
  EXPECT_FALSE(cuda_raw::tc_supported(p, &why));
}
#endif  // a build without CUDA reports its skip once, in tests/specs/cuda_target_test.cpp

}  // namespace
}  // namespace kprop::attention
