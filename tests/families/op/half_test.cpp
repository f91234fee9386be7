// f16/bf16 in the op family: half values through the YAML codec
// bit for bit (±0, subnormals, the max finite value, NaN, inf); the naive
// same-precision baseline of a half output computes in f32 and rounds to
// nearest even at the store, and its floor adds the store's rounding
// (kernels/op/op.h); the shipped rmsnorm spec passes a half kernel written
// as GPU kernels are (f32 arithmetic, half storage) and kills the precision
// bug of accumulating the sum of squares in the storage type.
#include "kprop/half.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "kernels/op/op.h"
#include "kprop/runner.h"
#include "kprop/spec.h"
#include "properties/op/family.h"
#include "tests/families/op/op_support.h"

namespace kprop::op {
namespace {

using namespace kprop::op::testing;

const char* const kSumSpec = R"(spec: halfsum
family: op
op:
  dims: {D: [1, 8]}
  inputs:
    x: {shape: [D], dtype: [f16, bf16], values: [normal, large, denormal], specials: 0.2}
  outputs:
    y: {shape: []}
  reference:
    y: sum(x)
target: reference
invariants:
  - matches_reference
)";

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// A case of kSumSpec with dtype `dt` and the values `x` (exact in dt).
Case sum_case(const Spec& spec, DType dt, std::vector<double> x) {
  Case c;
  c.decl = std::shared_ptr<const Decl>(spec.declared_family, &op_family(spec).decl());
  c.dims = {static_cast<int64_t>(x.size())};
  c.dtype = dt;
  c.dtypes = {dt};
  c.kinds = {-1};
  c.inputs = {std::move(x)};
  return c;
}

// Every special half value comes back bit for bit, written as the shortest
// text that reads back (f16's max 65504 as 65500, which rounds to it).
TEST(OpHalfCorpus, RoundTripIsExactWithZerosSubnormalsMaxAndSpecials) {
  const Spec spec = parse_spec(kSumSpec, "halfsum.yaml");
  const OpFamily& f = op_family(spec);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType dt : {DType::f16, DType::bf16}) {
    const double max = max_finite(dt), tiny = denorm_min(dt), normal = min_normal(dt);
    const std::vector<double> x = {0.0,
                                   -0.0,
                                   tiny,
                                   -tiny,
                                   normal - tiny,
                                   normal,
                                   max,
                                   -max,
                                   inf,
                                   -inf,
                                   nan,
                                   round_to(dt, 0.1),
                                   round_to(dt, 1.0 / 3),
                                   round_to(dt, -1e4),
                                   round_to(dt, 3.0e-5)};
    for (const double v : x) ASSERT_TRUE(std::isnan(v) || same_bits(round_to(dt, v), v)) << v;
    const Case c = sum_case(spec, dt, x);
    const Case back = round_trip(f, c);
    EXPECT_EQ(back.dtype, dt);
    EXPECT_EQ(back.dtypes, c.dtypes);
    ASSERT_EQ(back.inputs[0].size(), x.size());
    for (size_t k = 0; k < x.size(); ++k)
      EXPECT_TRUE(std::isnan(x[k]) ? std::isnan(back.inputs[0][k]) : same_bits(back.inputs[0][k], x[k]))
          << dtype_name(dt) << " value " << k << ": " << x[k] << " came back " << back.inputs[0][k];
    YAML::Emitter out;
    out << Traits::to_yaml(c);
    const std::string text = out.c_str();
    if (dt == DType::f16) {
      EXPECT_NE(text.find("[0, -0, 6e-08, -6e-08, 6.1e-05, 6.104e-05, 65500, -65500, .inf"),
                std::string::npos)
          << text;
    }
    EXPECT_NE(text.find("dtype: " + std::string(dtype_name(dt))), std::string::npos) << text;
  }
}

// A value a file writes that the dtype cannot hold reads as the nearest
// half value (ties to even), as an f32 file's reads as the nearest float.
TEST(OpHalfCorpus, UnrepresentableTextReadsAsTheNearestHalf) {
  const Spec spec = parse_spec(kSumSpec, "halfsum.yaml");
  const OpFamily& f = op_family(spec);
  const Case c = as_case(f.from_yaml(
      YAML::Load("{dtype: f16, dims: {D: 3}, inputs: {x: {dtype: f16, values: [0.1, 2049, 1e6]}}}")));
  EXPECT_EQ(c.inputs[0][0], half::round_to_f16(0.1));
  EXPECT_EQ(c.inputs[0][1], 2048.0);  // a tie: to the even mantissa
  EXPECT_EQ(c.inputs[0][2], std::numeric_limits<double>::infinity());
  const Case b = as_case(
      f.from_yaml(YAML::Load("{dtype: bf16, dims: {D: 1}, inputs: {x: {dtype: bf16, values: [257]}}}")));
  EXPECT_EQ(b.inputs[0][0], 256.0);  // 8 bits: 257 ties between 256 and 258, to even
}

// The naive baseline of a half output: f32 arithmetic, then the store
// rounded to nearest even. Summed in the half type, 2048 + 1 + 1 would stay
// 2048 (each + 1 a tie to even); in f32 it is 2050, stored exactly.
// 2050 + 1 = 2051 ties between 2050 and 2052 in f16: to even, 2052
// (truncation would give 2050).
TEST(OpHalfNaive, ComputesInF32AndRoundsToNearestEvenAtTheStore) {
  const Spec spec = parse_spec(kSumSpec, "halfsum.yaml");
  EXPECT_EQ(naive(sum_case(spec, DType::f16, {2048, 1, 1})).outputs[0][0], 2050.0);
  EXPECT_EQ(naive(sum_case(spec, DType::f16, {2050, 1})).outputs[0][0], 2052.0);
  EXPECT_EQ(reference(sum_case(spec, DType::f16, {2050, 1})).outputs[0][0], 2051.0);
  // bf16 (8 bits): 256 + 1 + 1 = 258 in f32, exact in bf16; 258 + 1 ties to 260.
  EXPECT_EQ(naive(sum_case(spec, DType::bf16, {256, 1, 1})).outputs[0][0], 258.0);
  EXPECT_EQ(naive(sum_case(spec, DType::bf16, {258, 1})).outputs[0][0], 260.0);
  // f32 arithmetic, not half: 1 + 2^-11 + 2^-11 is 1 in f16 arithmetic
  // (each addition a tie to even) but 1 + 2^-10 in f32, which f16 holds.
  EXPECT_EQ(naive(sum_case(spec, DType::f16, {1, 0x1p-11, 0x1p-11})).outputs[0][0], 1 + 0x1p-10);
  // A sum past the max finite value overflows at the store.
  EXPECT_EQ(naive(sum_case(spec, DType::f16, {65504, 32})).outputs[0][0],
            std::numeric_limits<double>::infinity());
}

// floor.Y of a half output: f32's term for the arithmetic, plus u_store ·
// max|reference.Y| plus half the smallest subnormal.
TEST(OpHalfNaive, FloorAddsTheStoreRounding) {
  const Spec spec = parse_spec(kSumSpec, "halfsum.yaml");
  const Case f16 = sum_case(spec, DType::f16, {2048, 1, 1});  // n = 3: 2 ceil(log2 3) = 4
  EXPECT_EQ(floor_of(f16, 0, {2050}), (8 + 4) * 0x1p-24 * 2050 + 0x1p-11 * 2050 + 0x1p-25);
  const Case bf16 = sum_case(spec, DType::bf16, {256, 1, 1, 1, 1});  // n = 5: 2 ceil(log2 5) = 6
  EXPECT_EQ(floor_of(bf16, 0, {-260}), (8 + 6) * 0x1p-24 * 260 + 0x1p-8 * 260 + 0x1p-134);
  // f32 unchanged: the arithmetic term only.
  Case f32 = f16;
  f32.dtype = DType::f32;
  f32.dtypes = {DType::f32};
  EXPECT_EQ(floor_of(f32, 0, {2050}), (8 + 4) * 0x1p-24 * 2050);
  EXPECT_EQ(unit_roundoff(DType::f16), 0x1p-11);
  EXPECT_EQ(unit_roundoff(DType::bf16), 0x1p-8);
  // Expressions name the store's unit roundoff (store_roundoff) beside the
  // arithmetic's (unit_roundoff, f32's for a half case).
  for (const auto& [c, store] : {std::pair{f16, 0x1p-11}, std::pair{bf16, 0x1p-8}, std::pair{f32, 0x1p-24}}) {
    expr::TensorMap m;
    m.want("store_roundoff"), m.want("unit_roundoff");
    Traits::tensors(c, nullptr, nullptr, m);
    ASSERT_NE(m.find("store_roundoff"), nullptr);
    EXPECT_EQ(m.find("store_roundoff")->data.at(0), store);
    EXPECT_EQ(m.find("unit_roundoff")->data.at(0), 0x1p-24);
  }
}

// Generation: every value drawn is exact in its half dtype and finite
// unless a declared special (large draws clamp to the finite range);
// denormal draws are subnormals of the half type.
TEST(OpHalfGeneration, ValuesAreHalvesAndNeverInfByRounding) {
  const Spec spec = parse_spec(R"(spec: halfgen
family: op
op:
  dims: {D: [1, 64]}
  inputs:
    x: {shape: [D], dtype: [f16, bf16], values: [large, denormal, normal], specials: {rate: 0.2, values: [max, denormal]}}
  outputs:
    y: {shape: [D]}
  reference:
    y: x * 2
target: reference
invariants:
  - matches_reference
)",
                               "halfgen.yaml");
  const OpFamily& f = op_family(spec);
  int large_seen = 0, subnormal_seen = 0, max_seen = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const std::vector<uint8_t> bytes = f.seed_bytes(spec.domain, seed, 100);
    const Case c = as_case(f.from_bytes(bytes.data(), bytes.size(), spec.domain));
    ASSERT_TRUE(c.dtype == DType::f16 || c.dtype == DType::bf16);
    for (const double v : c.inputs[0]) {
      ASSERT_TRUE(std::isfinite(v)) << dtype_name(c.dtype) << " seed " << seed;
      ASSERT_TRUE(same_bits(round_to(c.dtype, v), v)) << v;
      large_seen += std::fabs(v) > 256;
      max_seen += std::fabs(v) == max_finite(c.dtype);
      subnormal_seen += v != 0 && std::fabs(v) < min_normal(c.dtype);
    }
  }
  EXPECT_GT(large_seen, 0);
  EXPECT_GT(subnormal_seen, 0);
  EXPECT_GT(max_seen, 0);
  // Any byte string (the fuzz harness's input) decodes to halves in the domain.
  std::mt19937_64 gen(20261123);
  for (int n = 0; n < 300; ++n) {
    std::vector<uint8_t> bytes(gen() % 400);
    for (auto& b : bytes) b = static_cast<uint8_t>(gen());
    const AnyCase any = f.from_bytes(bytes.data(), bytes.size(), spec.domain);
    ASSERT_EQ(f.in_domain(any, spec.domain), "");
    for (const double v : as_case(any).inputs[0])
      ASSERT_TRUE(std::isfinite(v) && same_bits(round_to(as_case(any).dtype, v), v)) << v;
  }
}

// Shrinking a half element: every candidate is exact in its dtype and in
// the domain; a value with several significant digits gets a shorter one
// (0.3333 -> 0.3, rounded to f16), and greedy shrinking toward "element 0
// stays above 100" ends at a short decimal of small magnitude.
TEST(OpHalfShrink, ElementsShrinkToShortHalfValues) {
  const Spec spec = parse_spec(kSumSpec, "halfsum.yaml");
  for (const DType dt : {DType::f16, DType::bf16}) {
    Case c = sum_case(spec, dt, {round_to(dt, 1.0 / 3), max_finite(dt), round_to(dt, -12345.678)});
    bool shorter = false;
    rc::Seq<Case> seq = Traits::shrinks(c, spec.domain);
    while (auto next = seq.next()) {
      ASSERT_EQ(Traits::in_domain(*next, spec.domain), "");
      for (const double v : next->inputs[0]) ASSERT_TRUE(same_bits(round_to(dt, v), v)) << v;
      shorter = shorter || (next->dims[0] == 3 && next->inputs[0][0] == round_to(dt, 0.3));
    }
    EXPECT_TRUE(shorter) << dtype_name(dt);
    // Greedy: the first candidate that keeps x[0] > 100.
    for (int steps = 0; steps < 1000; ++steps) {
      std::optional<Case> first;
      rc::Seq<Case> s = Traits::shrinks(c, spec.domain);
      while (auto next = s.next())
        if (next->inputs[0][0] > 100) {
          first = std::move(*next);
          break;
        }
      if (!first) break;
      c = std::move(*first);
    }
    EXPECT_EQ(c.dims[0], 1) << dtype_name(dt);
    // f16's max: 7e4 rounds to inf, so its first digit truncated: 6e4; then
    // the digit kept, nearer 1 in magnitude: 600 (60 is not above 100).
    // bf16's 3e38 likewise ends at 300.
    EXPECT_EQ(c.inputs[0][0], dt == DType::f16 ? 600 : 300) << dtype_name(dt);
  }
}

// ---------------------------------------------------------------- the shipped spec
double input_at(const Case& c, size_t i, size_t k) {
  return c.inputs[i][k];
}

// RMSNorm as GPU kernels compute a half tensor: x, w loaded into f32, the
// row in f32, y stored rounded to nearest even (f32, f64: in that dtype).
// `sum_in_storage`: the sum of squares accumulated in the storage type,
// each square and each partial sum rounded to it (the precision bug).
Result rmsnorm_kernel(const Case& c, bool sum_in_storage) {
  const int64_t T = c.dims[0], D = c.dims[1];
  const DType dt = c.dtype;
  const DType arith = arithmetic_dtype(dt);
  auto a = [&](double v) { return round_to(arith, v); };
  auto s = [&](double v) { return sum_in_storage ? round_to(dt, v) : a(v); };
  const double eps = a(c.attrs[0]);
  Result r;
  r.outputs.assign(1, std::vector<double>(static_cast<size_t>(T * D)));
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double x = input_at(c, 0, static_cast<size_t>(t * D + j));
      ss = s(ss + s(x * x));
    }
    const double scale = a(1 / a(std::sqrt(a(a(ss / static_cast<double>(D)) + eps))));
    for (int64_t j = 0; j < D; ++j) {
      const double x = input_at(c, 0, static_cast<size_t>(t * D + j));
      r.outputs[0][static_cast<size_t>(t * D + j)] =
          round_to(dt, a(a(x * scale) * input_at(c, 1, static_cast<size_t>(j))));
    }
  }
  return r;
}

struct ShippedRun {
  RunReport report;
  std::shared_ptr<OpFamily> family;
  Spec spec;
};

ShippedRun run_shipped(const std::string& target, uint64_t seed, int trials) {
  Spec spec = load_spec(std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml");
  auto f = plant_mutants(spec, [](OpFamily& planted) {
    planted.mutant("half_kernel", "f32 arithmetic, half storage",
                   [](const Case& c) { return rmsnorm_kernel(c, false); });
    // (Not the spec's own sum_in_storage, its NumPy worker's op.mutants entry.)
    planted.mutant("kernel_sum_in_storage", "the sum of squares accumulated in the storage type",
                   [](const Case& c) { return rmsnorm_kernel(c, true); });
  });
  RunReport report = run_spec(spec, scratch_run(target, seed, trials, "kprop_op_half_test_findings"));
  return {std::move(report), f, std::move(spec)};
}

TEST(OpHalfSpec, ShippedRmsnormDrawsHalves) {
  const Spec spec = load_spec(std::string(KPROP_SOURCE_DIR) + "/specs/ops/rmsnorm.yaml");
  const auto& dts = op_family(spec).decl().case_dtypes;
  EXPECT_NE(std::find(dts.begin(), dts.end(), DType::f16), dts.end());
  EXPECT_NE(std::find(dts.begin(), dts.end(), DType::bf16), dts.end());
}

TEST(OpHalfSpec, HalfKernelPassesTheShippedRmsnorm) {
  const ShippedRun run = run_shipped("half_kernel", 20261123, 400);
  EXPECT_EQ(run.report.status, RunStatus::passed);
  for (const auto& inv : run.report.invariants)
    EXPECT_NE(inv.status, InvariantStatus::failed)
        << inv.name << ": " << (inv.counterexample ? inv.counterexample->case_yaml : "");
}

TEST(OpHalfSpec, SumInStorageIsKilledAndShrunkToAHalfCase) {
  const ShippedRun run = run_shipped("kernel_sum_in_storage", 20261123, 400);
  ASSERT_EQ(run.report.status, RunStatus::failed);
  const Finding* found = nullptr;
  for (const auto& inv : run.report.invariants)
    if (inv.counterexample) found = &*inv.counterexample;
  ASSERT_NE(found, nullptr);
  const YAML::Node n = case_node(*found);
  const std::string dtype = n["dtype"].as<std::string>();
  EXPECT_TRUE(dtype == "f16" || dtype == "bf16") << found->case_yaml;
  EXPECT_EQ(n["dims"]["T"].as<int>(), 1) << found->case_yaml;
  // The shrunk case decodes into the domain and the correct half kernel passes it.
  const AnyCase back = run.family->from_yaml(n);
  EXPECT_EQ(run.family->in_domain(back, run.spec.domain), "");
  RunOptions o = scratch_run("half_kernel", 20261123, 400, "kprop_op_half_test_findings");
  EXPECT_EQ(run_spec(run.spec, o).status, RunStatus::passed);
}

}  // namespace
}  // namespace kprop::op
