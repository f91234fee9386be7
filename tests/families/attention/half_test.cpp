// Attention in f16/bf16: the kernels store in the half type and compute in
// f32 (attention.h, "Precision"), the codec round-trips half values exactly,
// cases drawn from bytes hold representable values, and each precision
// mutant differs from the correct kernel only where its bug bites.
#include "kprop/half.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention/attention.h"
#include "kprop/draw.h"
#include "properties/attention/bounds.h"
#include "properties/attention/family.h"
#include "tests/support/compare.h"

namespace kprop::attention {
namespace {

// One head, Nq × Nk, D = 2, values exact in every dtype.
Case head(DType dtype, int nq, int nk, bool backward) {
  Case c;
  c.dtype = dtype;
  c.shape = {1, 1, 1, nq, nk, 2};
  c.block_q = 2;
  c.block_k = 3;
  for (int i = 0; i < nq * 2; ++i) c.q.push_back(0.25 * ((i * 7 % 5) - 2));
  for (int j = 0; j < nk * 2; ++j) c.k.push_back(0.5 * ((j * 3 % 5) - 2)), c.v.push_back((j * 5 % 7) - 3);
  if (backward)
    for (int i = 0; i < nq * 2; ++i) c.d_out.push_back((i % 3) - 1);
  return c;
}

using kprop::testing::max_abs_diff;

const Mutant<FwdResult>& forward_mutant(const std::string& name) {
  return find_mutant(forward_mutants(), name);
}

TEST(AttentionHalf, OutputsAreStoredInTheHalfTypeAndStatsInF32) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    Case c = head(dtype, 5, 7, true);
    c.mask = MaskKind::causal;
    const FwdResult f = tiled(c);
    for (double x : f.o) EXPECT_EQ(round_to(dtype, x), x) << dtype_name(dtype);
    for (double x : f.lse) {
      if (std::isfinite(x)) {
        EXPECT_EQ(double(float(x)), x);
      }
    }
    for (auto impl : {tiled_d, tiled_two_pass}) {
      const BwdResult b = impl(c);
      for (const auto* t : {&b.dq, &b.dk, &b.dv})
        for (double x : *t) EXPECT_EQ(round_to(dtype, x), x) << dtype_name(dtype);
    }
  }
}

// Every correct implementation stays inside the policy's floor alone (the
// naive error only widens it), on inputs where the half roundings matter.
TEST(AttentionHalf, CorrectKernelsStayInsideTheDerivedFloor) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    Case c = head(dtype, 6, 9, true);
    for (double& x : c.v) x = round_to(dtype, x * 1.37 + 0.11);
    for (double& x : c.q) x = round_to(dtype, x * 3.1);
    const ErrorScales f = floors(c, true, 8).all;
    const FwdResult rf = reference_forward(c), tf = tiled(c);
    EXPECT_LE(max_abs_diff(rf.o, tf.o), f.o) << dtype_name(dtype);
    EXPECT_LE(max_abs_diff(rf.lse, tf.lse), f.lse) << dtype_name(dtype);
    const BwdResult rb = reference_backward(c);
    for (auto impl : {tiled_d, tiled_two_pass}) {
      const BwdResult b = impl(c);
      EXPECT_LE(max_abs_diff(rb.dq, b.dq), f.dq) << dtype_name(dtype);
      EXPECT_LE(max_abs_diff(rb.dk, b.dk), f.dk) << dtype_name(dtype);
      EXPECT_LE(max_abs_diff(rb.dv, b.dv), f.dv) << dtype_name(dtype);
    }
    // The storage term is what makes room: an f32 floor alone is too tight.
    Case single = c;
    single.dtype = DType::f32;
    EXPECT_GT(max_abs_diff(rf.o, tf.o), floors(single, false, 8).all.o);
  }
}

// Two heads 2^12 apart in magnitude (the value kind `wide`): each is held to
// its own budget. One budget for the tensor (what the policy was) is set by
// the large head, whose f16 storage term alone (u·max|v| = 2^-11 · 2^13.6)
// exceeds every O of the small one: zeroing the small head passed.
TEST(AttentionHalf, EachHeadIsHeldToItsOwnBudget) {
  const Case one = head(DType::f16, 4, 5, true);
  Case c = one;
  c.shape.heads_q = c.shape.heads_kv = 2;
  auto twice = [](std::vector<double>& t, double scale) {
    const size_t n = t.size();
    for (size_t i = 0; i < n; ++i) t.push_back(t[i]);
    for (size_t i = 0; i < n; ++i) t[i] *= scale;  // the first head, scaled (exact: a power of two)
  };
  twice(c.q, 1), twice(c.k, 1), twice(c.v, 4096), twice(c.d_out, 1.0 / 4096);
  const Scales f = floors(c, true, 8);
  const FwdResult ref = reference_forward(c), naive = naive_forward(c);
  FwdResult got = tiled(c);
  const std::vector<int> dims = q_dims(c.shape);
  EXPECT_EQ(compare_tensor("O", dims, ref.o, got.o, naive.o, 2, f.of(&ErrorScales::o)).outcome,
            Outcome::pass);
  const size_t half = got.o.size() / 2;
  std::fill(got.o.begin() + long(half), got.o.end(), 0.0);  // the small head's O: all zeros
  const Verdict v = compare_tensor("O", dims, ref.o, got.o, naive.o, 2, f.of(&ErrorScales::o));
  EXPECT_EQ(v.outcome, Outcome::fail);
  EXPECT_NE(v.message.find("O[0,1,"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("group, 2 of 2"), std::string::npos) << v.message;
  // The one budget for the tensor: the blind spot this closes.
  const std::vector<double> one_budget = {f.all.o};
  EXPECT_EQ(compare_tensor("O", dims, ref.o, got.o, naive.o, 2, one_budget).outcome, Outcome::pass);
  // The same for the backward's dQ: the small head's gradient halved.
  const BwdResult bref = reference_backward(c), bnaive = naive_backward(c);
  BwdResult bgot = tiled_d(c);
  const std::vector<double> dq_floors = f.of(&ErrorScales::dq);
  EXPECT_EQ(compare_tensor("dQ", dims, bref.dq, bgot.dq, bnaive.dq, 2, dq_floors).outcome, Outcome::pass);
  for (size_t i = half; i < bgot.dq.size(); ++i) bgot.dq[i] *= 0.5;
  EXPECT_EQ(compare_tensor("dQ", dims, bref.dq, bgot.dq, bnaive.dq, 2, dq_floors).outcome, Outcome::fail);
}

// Grouped-query attention: O, LSE, D and dQ are held per query head, dK and
// dV per kv head (2 query heads share each of 2 kv heads here). kv head 0's
// values are 2^12 larger; kv head 1's query heads get a dO 2^12 smaller, so
// its dK and dV are too.
TEST(AttentionHalf, QueryHeadsAndKvHeadsAreHeldToTheirOwnBudgets) {
  const Case one = head(DType::f16, 4, 5, true);
  Case c = one;
  c.shape.heads_q = 4, c.shape.heads_kv = 2;
  c.q.clear(), c.d_out.clear(), c.k.clear(), c.v.clear();
  for (int h = 0; h < 4; ++h) {
    c.q.insert(c.q.end(), one.q.begin(), one.q.end());
    for (double x : one.d_out) c.d_out.push_back(h >= 2 ? x / 4096 : x);
  }
  for (int kvh = 0; kvh < 2; ++kvh) {
    c.k.insert(c.k.end(), one.k.begin(), one.k.end());
    for (double x : one.v) c.v.push_back(kvh == 0 ? x * 4096 : x);
  }
  const Scales f = floors(c, true, 8);
  const FwdResult ref = reference_forward(c), naive = naive_forward(c);
  FwdResult got = tiled(c);
  const std::vector<double> o_floors = f.of(&ErrorScales::o);
  ASSERT_EQ(o_floors.size(), 4u);  // per (batch, query head)
  EXPECT_EQ(compare_tensor("O", q_dims(c.shape), ref.o, got.o, naive.o, 2, o_floors).outcome, Outcome::pass);
  const size_t per_head = got.o.size() / 4;
  std::fill(got.o.begin() + long(3 * per_head), got.o.end(), 0.0);  // query head 3 (kv head 1): zeros
  const Verdict o = compare_tensor("O", q_dims(c.shape), ref.o, got.o, naive.o, 2, o_floors);
  EXPECT_EQ(o.outcome, Outcome::fail);
  EXPECT_NE(o.message.find("O[0,3,"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("group, 4 of 4"), std::string::npos) << o.message;
  const BwdResult bref = reference_backward(c), bnaive = naive_backward(c);
  BwdResult bgot = tiled_d(c);
  const std::vector<double> dk_floors = f.of(&ErrorScales::dk);
  ASSERT_EQ(dk_floors.size(), 2u);  // per (batch, kv head)
  EXPECT_EQ(compare_tensor("dK", kv_dims(c.shape), bref.dk, bgot.dk, bnaive.dk, 2, dk_floors).outcome,
            Outcome::pass);
  std::fill(bgot.dk.begin() + long(bgot.dk.size() / 2), bgot.dk.end(), 0.0);  // kv head 1's dK: zeros
  const Verdict dk = compare_tensor("dK", kv_dims(c.shape), bref.dk, bgot.dk, bnaive.dk, 2, dk_floors);
  EXPECT_EQ(dk.outcome, Outcome::fail);
  EXPECT_NE(dk.message.find("group, 2 of 2"), std::string::npos) << dk.message;
}

// finite_differences reads the dQ, dK and dV scales of the case's fp64 copy
// and takes the case's own (cached) ones where the two softmax scales are
// equal: those fields depend on the dtype through that scale alone.
TEST(AttentionHalf, GradientScalesOfTheFp64CopyAreTheCasesOwnAtTheSameSoftmaxScale) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    Case c = head(dtype, 4, 5, true);
    c.scale = 0.5;  // exact in every dtype
    Case c64 = c;
    c64.dtype = DType::f64;
    ASSERT_EQ(effective_scale(c), effective_scale(c64));
    const Scales own = error_scales(c, true), copy = error_scales(c64, true);
    for (double ErrorScales::*field : {&ErrorScales::dq, &ErrorScales::dk, &ErrorScales::dv}) {
      EXPECT_EQ(own.of(field), copy.of(field)) << dtype_name(dtype);
      EXPECT_GT(own.all.*field, 0) << dtype_name(dtype);
    }
    c.scale = c64.scale = 0;  // 1/√2, which f32 rounds
    EXPECT_NE(effective_scale(c), effective_scale(c64)) << dtype_name(dtype);
  }
}

TEST(AttentionHalf, PrecisionMutantsEqualTheKernelOutsideHalfCases) {
  for (const char* name : {"pv_in_storage", "rowsum_in_storage", "lse_in_storage"})
    for (DType dtype : {DType::f32, DType::f64}) {
      const Case c = head(dtype, 4, 7, false);
      const FwdResult a = forward_mutant(name).run(c), b = tiled(c);
      EXPECT_EQ(a.o, b.o) << name;
      EXPECT_EQ(a.lse, b.lse) << name;
    }
}

// An f16 accumulator for Σ_j P_j v_j overflows once the sum passes 65504
// while every V and O stay in range.
TEST(AttentionHalf, PvInStorageOverflowsInF16) {
  Case c = head(DType::f16, 1, 4, false);
  c.q.assign(2, 0);  // P uniform: O is the mean of V
  c.v = {30000, 1, 30000, 1, 30000, 1, 30000, 1};
  const FwdResult good = tiled(c), bad = forward_mutant("pv_in_storage").run(c);
  EXPECT_EQ(good.o[0], 30000);
  EXPECT_TRUE(std::isinf(bad.o[0]));
}

// bf16 holds 8 significant bits: a row sum of ones stops at 256.
TEST(AttentionHalf, RowsumInStorageStagnatesInBf16) {
  Case c = head(DType::bf16, 1, 300, false);
  c.q.assign(2, 0);
  c.block_k = 300;
  const FwdResult good = tiled(c), bad = forward_mutant("rowsum_in_storage").run(c);
  EXPECT_NEAR(good.lse[0], std::log(300.0), 1e-6);
  EXPECT_NEAR(bad.lse[0], std::log(256.0), 1e-6);
}

TEST(AttentionHalf, LseInStorageLosesBitsTheF32LseKeeps) {
  Case c = head(DType::f16, 1, 3, false);
  c.q = {4, 4};
  const FwdResult good = tiled(c), bad = forward_mutant("lse_in_storage").run(c);
  const double u = storage_roundoff(DType::f16);
  EXPECT_LT(std::fabs(good.lse[0] - reference_forward(c).lse[0]), 1e-5);
  EXPECT_EQ(bad.lse[0], half::round_to_f16(good.lse[0]));
  EXPECT_NE(bad.lse[0], good.lse[0]);
  EXPECT_LE(std::fabs(bad.lse[0] - good.lse[0]), u * std::fabs(good.lse[0]));
}

// Special values through the YAML codec: ±0, subnormals and the largest
// finite value of each half type read back bit-exactly.
TEST(AttentionHalf, YamlRoundTripIsExact) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    const double tiny = dtype == DType::f16 ? half::f16_min_subnormal : half::bf16_min_subnormal;
    const double big = dtype == DType::f16 ? half::f16_max : half::bf16_max;
    Case c = head(dtype, 2, 3, true);
    c.q = {0.0, -0.0, tiny, -3 * tiny};
    c.k = {big, -big, round_to(dtype, 0.1), round_to(dtype, 1.0 / 3), 7 * tiny, 0.5};
    c.v = {round_to(dtype, 65504.0 / 3), 1, 2, 3, 4, 5};
    c.scale = 0.3;
    const Case back = BwdTraits::from_yaml(BwdTraits::to_yaml(c));
    EXPECT_EQ(back, c) << dtype_name(dtype);
    EXPECT_TRUE(std::signbit(back.q[1]));
    Case f = c;
    f.d_out.clear();
    EXPECT_EQ(FwdTraits::from_yaml(FwdTraits::to_yaml(f)), f);
  }
}

// libFuzzer's bytes reach half cases through the same builder: every value
// they decode to is one of the dtype (the codec would round any other
// without a word), and the case read back from YAML equals it (FamilyContract
// checks that decoded cases are valid and compares their YAML texts).
TEST(AttentionHalf, HalfCasesFromBytesHoldHalfValuesAndReadBackEqual) {
  const Values domain = Values::defaults(BwdTraits::domain_schema());
  int halves = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    std::vector<uint8_t> bytes(512);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t((seed * 2654435761u + i * 40503u) >> 13);
    ByteReader reader(bytes.data(), bytes.size());
    BytesDraw draw(reader);
    const Case c = BwdTraits::build(draw, domain);
    if (!is_half(c.dtype)) continue;
    ++halves;
    for (const auto* t : {&c.q, &c.k, &c.v, &c.d_out})
      for (double x : *t) ASSERT_EQ(round_to(c.dtype, x), x) << seed;
    EXPECT_EQ(BwdTraits::from_yaml(BwdTraits::to_yaml(c)), c) << seed;
  }
  EXPECT_GT(halves, 50);
}

}  // namespace
}  // namespace kprop::attention
