// The `cuda` implementation of attention.bwd on a device (every test here
// GTEST_SKIPs without one: reported SKIPPED, never passed). What every
// `cuda` implementation shares (skipped without a device, passes its spec
// on one) is tests/specs/cuda_target_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "properties/attention/family.h"
#include "tests/support/cuda.h"
#include "tests/support/registered.h"
#if KPROP_HAVE_CUDA
#include "kernels/attention/attention_bwd_cuda.h"
#include "tests/families/attention/tc_case.h"
#endif

namespace kprop::attention {
namespace {

BwdResult run_cuda(const Case& c) {
  return testing::registered_implementation<BwdTraits>("attention.bwd", "cuda")(c);
}

// GQA 4/2, Nq 7 > Nk 5 under a causal mask (the first two rows fully masked),
// tiles 3x2 that divide neither length, small integer-ish values.
Case gqa_case(DType dtype, MaskKind mask) {
  Case c;
  c.shape = {2, 4, 2, 7, 5, 3};
  c.block_q = 3;
  c.block_k = 2;
  c.dtype = dtype;
  c.mask = mask;
  if (mask == MaskKind::key_padding) c.key_lengths = {0, 4};
  if (mask == MaskKind::boolean)
    for (int x = 0; x < 2 * 7 * 5; ++x) c.allowed.push_back(static_cast<uint8_t>((x * 7 % 3) != 0));
  for (size_t i = 0; i < c.shape.q_size(); ++i)
    c.q.push_back(0.25 * double(int(i * 7 % 9) - 4)), c.d_out.push_back(0.5 * double(int(i % 5) - 2));
  for (size_t j = 0; j < c.shape.kv_size(); ++j)
    c.k.push_back(0.25 * double(int(j * 5 % 7) - 3)), c.v.push_back(double(int(j * 3 % 11) - 5));
  return c;
}

// --- device only

TEST(AttentionBwdCuda, MatchesTheTiledCpuKernelOnEveryMask) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  for (DType dtype : {DType::f64, DType::f32})
    for (MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::key_padding, MaskKind::boolean}) {
      const Case c = gqa_case(dtype, mask);
      const BwdResult got = run_cuda(c), want = reference_backward(c);
      // |values| <= 5, D = 3, Nk = 5: gradients are O(100); f32 rounding of a
      // few dozen terms stays far under 1e-3 of that, f64 under 1e-10.
      const double tol = dtype == DType::f64 ? 1e-10 : 1e-3;
      for (auto field : {&BwdResult::dq, &BwdResult::dk, &BwdResult::dv, &BwdResult::d}) {
        ASSERT_EQ((got.*field).size(), (want.*field).size());
        for (size_t i = 0; i < (want.*field).size(); ++i)
          ASSERT_NEAR((got.*field)[i], (want.*field)[i], tol) << mask_name(mask) << " " << dtype_name(dtype);
      }
      EXPECT_GT(got.workspace_peak, 0u);
    }
}

TEST(AttentionBwdCuda, HalvesTilesTheDeviceCannotHold) {
  // f64, D = 64 with 64×64 tiles needs about 230 KB of shared memory per
  // block, past an H200's 227 KiB: the kernel halves the tiles and runs (it
  // threw, so attention_bwd's gpu profile crashed on finite_differences'
  // fp64 copy of an f16 case).
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  Case c = gqa_case(DType::f64, MaskKind::causal);
  c.shape = {1, 2, 1, 70, 66, 64};
  c.block_q = c.block_k = 64;
  c.q.assign(c.shape.q_size(), 0.0), c.d_out.assign(c.shape.q_size(), 0.0);
  c.k.assign(c.shape.kv_size(), 0.0), c.v.assign(c.shape.kv_size(), 0.0);
  for (size_t i = 0; i < c.q.size(); ++i)
    c.q[i] = 0.25 * double(int(i * 7 % 9) - 4), c.d_out[i] = 0.5 * double(int(i % 5) - 2);
  for (size_t j = 0; j < c.k.size(); ++j)
    c.k[j] = 0.25 * double(int(j * 5 % 7) - 3), c.v[j] = double(int(j * 3 % 11) - 5);
  const BwdResult got = run_cuda(c), want = reference_backward(c);
  // f64 arithmetic over D = 64 and 66 keys on values of magnitude <= 5:
  // rounding stays below 1e-9 of gradients of magnitude <= 1e3.
  for (auto field : {&BwdResult::dq, &BwdResult::dk, &BwdResult::dv})
    for (size_t i = 0; i < (want.*field).size(); ++i) ASSERT_NEAR((got.*field)[i], (want.*field)[i], 1e-9);
}

TEST(AttentionBwdCuda, IsBitwiseDeterministic) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  const Case c = gqa_case(DType::f32, MaskKind::causal);
  const BwdResult a = run_cuda(c), b = run_cuda(c);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

#if KPROP_HAVE_CUDA
// ---------------------------------------------------------------- tensor cores
// The f16/bf16 backward (WMMA, attention_bwd_cuda_tc.cu) against the fp64
// reference (reference_backward), per element, within a bound derived from
// the kernel's arithmetic. u: the dtype's unit roundoff (2^-11 f16, 2^-8
// bf16); e = 2^-24 (f32); σ the scale; A = σ·D·max|q|·max|k| bounds |σS|;
// P, dP = dO·Vᵀ, D, dS = P(dP − D) and the gradients the reference's (fp64,
// from its O and LSE); B_ij = Σ_d|dO_id v_jd|. First-order terms:
//  1. the forward (the tensor-core kernel, tests cuda_fwd_test.cpp derive
//     these): |ΔO| <= τ_O = max|V|(2u + e(2A(D+3) + 2.6N + 20)) and
//     |ΔLSE| <= τ_L = e(A(D+3) + 1.1N + 2A + 2 ln N + 12);
//  2. σS recomputed in f32 on the tensor cores: the D products of 16-bit
//     values are exact, the D − 1 sums 2e each (adders that truncate), σ in
//     f32 is 1/sqrt(D) twice rounded (2e) and multiplies once (e):
//     2A(D+2)e; the subtraction of LSE e(A + max|LSE|); expf 2 ulps (4e):
//     P is within relative ρ = 2A(D+2)e + τ_L + e(A + max|LSE|) + 4e of the
//     reference's;
//  3. P rounded to the dtype for Pᵀ·dO: relative u, plus 2^-25 absolute
//     where an f16 P is subnormal (sub; 0 for bf16, whose range is f32's);
//  4. dV_jd = Σ P dO over the m_j rows (of the group's heads) that see key j,
//     f32 sums (2e per step for adders that truncate), stored in the dtype:
//     |ΔdV| <= (ρ + u + 2e·m_j)·Σ_i P_ij|dO_id| + m_j·sub·max|dO| + u|dV|;
//  5. D comes from the kernel's own stored O: the test forms
//     D°_i = Σ_d dO_id O_id from the O the kernel returned (exact values of
//     the dtype) in fp64, and holds dK and dQ to the reference's formulas
//     with D° in place of D (dS° = P(dP − D°), dK°, dQ°): the stored O's
//     rounding (up to τ_O per element, which would swamp dK and dQ) is the
//     forward's, checked by D° against the reference's D within
//     τ_O Σ_d|dO_id|. The kernel's D is within
//     ΔD_i = 2eD Σ_d|dO_id O_id| + e|D°_i| of D°_i;
//  6. dP in f32: 2eD·B_ij; so dS before its rounding is within
//     P_ij(2eD·B_ij + ΔD_i) + (ρ + 2e)|dS°_ij|, and after it within
//     E_ij = that + u|dS°_ij| + sub;
//  7. dK_jd = σ Σ_i dS_ij q_id over m_j rows, dQ_id = σ Σ_j dS_ij k_jd over
//     Nk keys (q, k exact in the dtype, so each product is exact in f32):
//     |ΔdK| <= σ(Σ_i E_ij|q_id| + 2e·m_j Σ_i|dS°_ij q_id|) + (u + 3e)|dK°|,
//     |ΔdQ| <= σ(Σ_j E_ij|k_jd| + 2e·Nk Σ_j|dS°_ij k_jd|) + (u + 3e)|dQ°|
//     (σ applied once at the end: its own 2e and the product's e, then the
//     store's u).
// A transposed or misindexed tile, a wrong row of LSE or D, a missing scale
// or a dropped tile is off by O(|gradient|), far outside these.
struct TcBwdCase {
  int batch, heads_q, heads_kv, nq, nk, dim;
  cuda_raw::TcMask mask;
  std::vector<int> key_lengths;
};

struct TcBwdErrors {
  double ratio[5] = {0, 0, 0, 0, 0};  // max |error| / bound: dQ, dK, dV, D, the forward's O (via D°)
  size_t nan = 0;
};

// A backward under test: the case in its f16/bf16 dtype (values exact in it)
// to the kernel's outputs.
using BwdKernel = std::function<BwdResult(const Case&)>;

TcBwdErrors run_tc_bwd(cuda_raw::Half type, const TcBwdCase& tc, uint32_t seed,
                       const BwdKernel& kernel = cuda_backward, std::vector<double>* grads = nullptr) {
  Case c = tc_case(tc);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u1(-1.f, 1.f);
  auto rounded = [&](float x) { return double(cuda_raw::round_half(type, x)); };
  for (size_t i = 0; i < c.shape.q_size(); ++i)
    c.q.push_back(rounded(2 * u1(rng))), c.d_out.push_back(rounded(u1(rng)));
  for (size_t i = 0; i < c.shape.kv_size(); ++i)
    c.k.push_back(rounded(u1(rng))), c.v.push_back(rounded(u1(rng)));
  const BwdResult ref = reference_backward(c);

  const Shape& s = c.shape;
  Case half = c;
  half.dtype = type == cuda_raw::Half::f16 ? DType::f16 : DType::bf16;
  half.block_q = half.block_k = 64;
  const BwdResult got = kernel(half);
  const std::vector<double>&o = got.o, &d = got.d, &dq = got.dq, &dk = got.dk, &dv = got.dv;
  if (grads) {
    *grads = dq;
    for (const auto* x : {&dk, &dv, &d}) grads->insert(grads->end(), x->begin(), x->end());
  }

  const bool f16 = type == cuda_raw::Half::f16;
  const double e = std::ldexp(1.0, -24), u = std::ldexp(1.0, f16 ? -11 : -8),
               sub = f16 ? std::ldexp(1.0, -25) : 0;
  const double sigma = effective_scale(c), D = s.dim, N = s.nk;
  double qmax = 0, kmax = 0, vmax = 0, domax = 0, lmax = 0;
  for (double x : c.q) qmax = std::max(qmax, std::fabs(x));
  for (double x : c.k) kmax = std::max(kmax, std::fabs(x));
  for (double x : c.v) vmax = std::max(vmax, std::fabs(x));
  for (double x : c.d_out) domax = std::max(domax, std::fabs(x));
  for (double x : ref.lse)
    if (std::isfinite(x)) lmax = std::max(lmax, std::fabs(x));
  const double A = sigma * D * qmax * kmax;
  const double tau_o = vmax * (2 * u + e * (2 * A * (D + 3) + 2.6 * N + 20));
  const double tau_l = e * (A * (D + 3) + 1.1 * N + 2 * A + 2 * std::log(N) + 12);
  const double rho = 2 * A * (D + 2) * e + tau_l + e * (A + lmax) + 4 * e;

  const size_t dim = size_t(s.dim);
  std::vector<double> tv(s.kv_size()), ek(s.kv_size()), tk(s.kv_size()), eq(s.q_size()), tq(s.q_size());
  std::vector<double> dk_own(s.kv_size()), dq_own(s.q_size());  // the reference's formulas with D°
  std::vector<double> d_own(s.rows()), d_bound(s.rows()), o_bound(s.rows());
  std::vector<double> rows_seeing(size_t(s.batch) * s.heads_kv * s.nk);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const int kvh = h / s.group();
      for (int i = 0; i < s.nq; ++i) {
        const size_t row = (size_t(b) * s.heads_q + h) * s.nq + i;
        const double* qi = &c.q[row * dim];
        const double* doi = &c.d_out[row * dim];
        double sum_do = 0, sum_doo = 0, own = 0;
        for (size_t x = 0; x < dim; ++x) {
          const double ox = o[row * dim + x];  // the kernel's stored O, exact in the dtype
          own += doi[x] * ox, sum_do += std::fabs(doi[x]), sum_doo += std::fabs(doi[x] * ox);
        }
        const double delta_d = 2 * e * D * sum_doo + e * std::fabs(own);
        d_own[row] = own, d_bound[row] = delta_d, o_bound[row] = tau_o * sum_do;
        if (!std::isfinite(ref.lse[row])) continue;
        for (int j = 0; j < s.nk; ++j) {
          if (c.mask == MaskKind::causal && j > i + s.nk - s.nq) continue;
          if (c.mask == MaskKind::key_padding && j >= c.key_lengths[size_t(b)]) continue;
          const size_t kv = (size_t(b) * s.heads_kv + kvh) * s.nk + j;
          const double* kj = &c.k[kv * dim];
          const double* vj = &c.v[kv * dim];
          double sc = 0, dp = 0, bij = 0;
          for (size_t x = 0; x < dim; ++x)
            sc += qi[x] * kj[x], dp += doi[x] * vj[x], bij += std::fabs(doi[x] * vj[x]);
          const double p = std::exp(sigma * sc - ref.lse[row]), ds = p * (dp - own);
          const double err = p * (2 * e * D * bij + delta_d) + (rho + 2 * e + u) * std::fabs(ds) + sub;
          rows_seeing[kv] += 1;
          for (size_t x = 0; x < dim; ++x) {
            dk_own[kv * dim + x] += sigma * ds * qi[x];
            dq_own[row * dim + x] += sigma * ds * kj[x];
            tv[kv * dim + x] += p * std::fabs(doi[x]);
            ek[kv * dim + x] += err * std::fabs(qi[x]);
            tk[kv * dim + x] += std::fabs(ds * qi[x]);
            eq[row * dim + x] += err * std::fabs(kj[x]);
            tq[row * dim + x] += std::fabs(ds * kj[x]);
          }
        }
      }
    }
  TcBwdErrors r;
  auto note = [&](int which, double got, double want, double bound) {
    if (std::isnan(got)) ++r.nan;
    const double ratio = std::fabs(got - want) / std::max(bound, 1e-300);
    r.ratio[which] =
        std::max(r.ratio[which], std::isnan(ratio) ? std::numeric_limits<double>::infinity() : ratio);
  };
  for (size_t x = 0; x < s.q_size(); ++x)
    note(0, dq[x], dq_own[x], sigma * (eq[x] + 2 * e * N * tq[x]) + (u + 3 * e) * std::fabs(dq_own[x]));
  for (size_t x = 0; x < s.kv_size(); ++x) {
    const double m = rows_seeing[x / dim];
    note(1, dk[x], dk_own[x], sigma * (ek[x] + 2 * e * m * tk[x]) + (u + 3 * e) * std::fabs(dk_own[x]));
    note(2, dv[x], ref.dv[x], (rho + u + 2 * e * m) * tv[x] + m * sub * domax + u * std::fabs(ref.dv[x]));
  }
  for (size_t x = 0; x < s.rows(); ++x)
    if (std::isfinite(ref.lse[x])) {
      note(3, d[x], d_own[x], d_bound[x]);
      note(4, d_own[x], ref.d[x], o_bound[x]);
    } else {  // a fully masked row: O = 0, so D = 0 exactly (its dQ row is checked above)
      note(3, d[x], 0.0, 0.0);
    }
  return r;
}

std::vector<TcBwdCase> tc_bwd_cases() {
  using cuda_raw::TcMask;
  std::vector<TcBwdCase> cases = {
      {1, 2, 2, 200, 200, 64, TcMask::none, {}},                   // N not a multiple of the 64-row tiles
      {2, 4, 2, 128, 128, 128, TcMask::none, {}},                  // GQA, group 2
      {1, 6, 2, 77, 333, 128, TcMask::none, {}},                   // GQA, group 3, Nq != Nk
      {1, 3, 1, 100, 300, 128, TcMask::causal, {}},                // causal, Nq < Nk
      {1, 2, 2, 300, 100, 64, TcMask::causal, {}},                 // causal, Nq > Nk: 200 empty rows
      {3, 2, 1, 65, 130, 128, TcMask::key_padding, {0, 77, 130}},  // an empty batch, a partial tile
      {1, 1, 1, 1, 1, 64, TcMask::none, {}},                       // one query, one key
  };
  if (const char* max = std::getenv("KPROP_TC_MAX_CASES"))
    cases.resize(std::min(cases.size(), static_cast<size_t>(std::max(1, std::atoi(max)))));
  return cases;
}

TEST(AttentionBwdCudaTensorCore, MatchesTheFp64Reference) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  uint32_t seed = 300;
  for (cuda_raw::Half type : {cuda_raw::Half::f16, cuda_raw::Half::bf16})
    for (const TcBwdCase& tc : tc_bwd_cases()) {
      const TcBwdErrors r = run_tc_bwd(type, tc, ++seed);
      const std::string what = std::string(type == cuda_raw::Half::f16 ? "f16" : "bf16") +
                               " B=" + std::to_string(tc.batch) + " Hq=" + std::to_string(tc.heads_q) +
                               " Hkv=" + std::to_string(tc.heads_kv) + " Nq=" + std::to_string(tc.nq) +
                               " Nk=" + std::to_string(tc.nk) + " D=" + std::to_string(tc.dim) + " mask " +
                               std::to_string(int(tc.mask));
      EXPECT_EQ(r.nan, 0u) << what;
      for (double ratio : r.ratio) EXPECT_LE(ratio, 1.0) << what;
      std::printf("[ tc bwd ] %-52s err/bound dQ %.3f dK %.3f dV %.3f D %.3f O %.3f\n", what.c_str(),
                  r.ratio[0], r.ratio[1], r.ratio[2], r.ratio[3], r.ratio[4]);
    }
}

TEST(AttentionBwdCudaTensorCore, IsBitwiseDeterministic) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "needs a CUDA device";
  std::vector<double> a, b;
  const TcBwdCase tc{1, 4, 2, 150, 190, 128, cuda_raw::TcMask::causal, {}};
  run_tc_bwd(cuda_raw::Half::bf16, tc, 11, cuda_backward, &a);
  run_tc_bwd(cuda_raw::Half::bf16, tc, 11, cuda_backward, &b);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(double)));
}

// The check above, without a device, on the CPU kernel that rounds where the
// tensor-core one does (tiled_d with f16/bf16 storage: P and dS before their
// products, the gradients at the store; f32 arithmetic): it holds there, so
// the bound is not tighter than the arithmetic it models, and three of the
// family's backward mutants with that storage fail it (the scale missing
// from dK, D rounded to the dtype, dS without its factor P), so it is not
// looser than the bugs it is for.
TEST(AttentionBwdCudaTensorCore, TheCheckHoldsForTheCpuHalfKernelAndCatchesMutants) {
  const TcBwdCase tc{1, 4, 2, 100, 130, 64, cuda_raw::TcMask::causal, {}};
  const auto worst = [](const TcBwdErrors& r) {
    return *std::max_element(std::begin(r.ratio), std::end(r.ratio));
  };
  for (cuda_raw::Half type : {cuda_raw::Half::f16, cuda_raw::Half::bf16}) {
    const TcBwdErrors r = run_tc_bwd(type, tc, 21, tiled_d);
    std::printf("[ tc bwd ] tiled_d %s: err/bound dQ %.3f dK %.3f dV %.3f D %.3f O %.3f\n",
                type == cuda_raw::Half::f16 ? "f16" : "bf16", r.ratio[0], r.ratio[1], r.ratio[2], r.ratio[3],
                r.ratio[4]);
    EXPECT_EQ(r.nan, 0u);
    EXPECT_LE(worst(r), 1.0) << "tiled_d, " << (type == cuda_raw::Half::f16 ? "f16" : "bf16");
    for (const char* name : {"dk_missing_scale", "d_in_storage", "dsoftmax_missing_p"}) {
      const double bad = worst(run_tc_bwd(type, tc, 21, find_mutant(backward_mutants(), name).run));
      std::printf("[ tc bwd ] mutant %s: worst err/bound %.3g\n", name, bad);
      EXPECT_GT(bad, 1.0) << name;
    }
  }
}

TEST(AttentionBwdCudaTensorCore, RejectsUnsupportedShapes) {  // the forward's rules (cuda_fwd_test.cpp)
  cuda_bwd_raw::TcBwdParams p;
  p.dim = 96;
  const char* why = nullptr;
  EXPECT_FALSE(cuda_bwd_raw::tc_backward_supported(p, &why));
  EXPECT_STREQ(why, "head dimension must be 64 or 128");
}
#endif

}  // namespace
}  // namespace kprop::attention
