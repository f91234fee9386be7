// The tolerance policy for comparing an implementation against the fp64
// reference (docs/DESIGN.md, "Tolerance policy"; after FlashAttention's
// tests): the target's error may be at most k × the error of a naive
// computation in the target's own precision, plus an absolute floor. NaN and
// ±inf must match exactly. fp64-against-fp64 checks use atol + rtol·|want|
// instead (within). Every family declares these parameters with the field::
// helpers below and reports kErrorRatio with error_ratio.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "kprop/values.h"

namespace kprop {

struct ToleranceReport {
  bool ok = true;
  size_t worst_index = 0;
  double target_error = 0;    // max |target - reference|
  double baseline_error = 0;  // max |naive - reference|
  double allowed = 0;         // k * baseline_error + floor
  std::string message;        // why not ok
};

// `target` and `naive` have the reference's length. `k` defaults to 2.
ToleranceReport compare_with_baseline(std::span<const double> reference, std::span<const double> target,
                                      std::span<const double> naive, double k, double abs_floor);

// The same policy group by group: the tensor is floors.size() equal,
// contiguous groups (attention: one per (batch, head)), each held to k ×
// its own naive error + its own floor. One budget for the whole tensor is
// set by its largest group: a group of values 2^-12 the size of another's
// could be wrong by all it holds (zeros, a wrong head) and pass. The report
// is the failing group's (the worst one's where several fail), or on a pass
// the one of the largest error ratio; worst_index is the tensor's. A single
// floor, or a length the groups do not divide, is the whole-tensor policy
// at the largest floor.
ToleranceReport compare_with_baseline(std::span<const double> reference, std::span<const double> target,
                                      std::span<const double> naive, double k,
                                      std::span<const double> floors);

// The naive baseline as a comparison with another oracle than the family's
// own reference reads it: naive + (oracle - own), elementwise, so that its
// distance to the oracle is the naive computation's distance to the
// family's fp64 reference (its rounding), not that plus whatever the oracle
// computes differently (Trial::own_reference). `naive` unchanged where the
// lengths differ.
std::vector<double> recentred(const std::vector<double>& naive, const std::vector<double>& own,
                              const std::vector<double>& oracle);

// Plain |a - b| <= atol + rtol·|b| elementwise (within), non-finite values
// equal. `offset`: the spans are a part of a tensor starting there; the
// report names elements by their index in the tensor.
ToleranceReport compare_close(std::span<const double> reference, std::span<const double> target, double atol,
                              double rtol, size_t offset = 0);

// The one atol/rtol rule (numpy.isclose's) for every family's elementwise
// checks, with the parameters declared by field::atol / field::rtol /
// field::tolerance (below). The error allowed an element of magnitude
// `magnitude` (|want|, or a check's own natural scale):
inline double allowed_error(double atol, double rtol, double magnitude) {
  return atol + rtol * magnitude;
}
// |got - want| <= atol + rtol·|want|; false when either is NaN. An infinity
// is within only of itself: atol + rtol·inf would allow any value next to
// an infinite `want`, and inf - inf is NaN.
inline bool within(double got, double want, double atol, double rtol) {
  if (!std::isfinite(got) || !std::isfinite(want)) return got == want;
  return std::fabs(got - want) <= allowed_error(atol, rtol, std::fabs(want));
}

// error / allowed, the kErrorRatio (kprop/family.h) a passing check reports:
// 0 for no error, +inf for an error where none is allowed.
inline double error_ratio(double error, double allowed) {
  return allowed > 0 ? error / allowed : (error > 0 ? INFINITY : 0);
}
inline double error_ratio(const ToleranceReport& r) {
  return error_ratio(r.target_error, r.allowed);
}
// within()'s margin as a ratio: |got - want| / (atol + rtol·|want|), so
// within() holds exactly when this is <= 1 (0 for equal infinities, +inf
// for a NaN or an infinity against anything else).
inline double within_ratio(double got, double want, double atol, double rtol) {
  if (!std::isfinite(got) || !std::isfinite(want)) return got == want ? 0 : INFINITY;
  return error_ratio(std::fabs(got - want), allowed_error(atol, rtol, std::fabs(want)));
}

// Tolerance parameters of an invariant, keyed, bounded and documented alike
// in every family (checked with the functions above):
//   atol  absolute tolerance, in [0, max]
//   rtol  relative tolerance, in [0, 1]
//   k     allowed multiple of the naive same-precision computation's error
//         (compare_with_baseline), in [min, 1e6]
namespace field {
inline constexpr const char* kAtolDoc = "absolute tolerance";
inline constexpr const char* kRtolDoc = "relative tolerance";
inline constexpr const char* kKDoc = "allowed multiple of the naive same-precision computation's error";
Field atol(double fallback, std::string doc = kAtolDoc, double max = 1e3);
Field rtol(double fallback, std::string doc = kRtolDoc);
Field k(double fallback, std::string doc = kKDoc, double min = 1);
// The map `tol: {atol, rtol}` (an fp64-against-fp64 comparison: within),
// `doc` saying why these values.
Field tolerance(double atol_fallback, double rtol_fallback, std::string doc, std::string atol_doc = kAtolDoc,
                std::string rtol_doc = kRtolDoc);
}  // namespace field

// True when a and b are both NaN, equal infinities, or finite.
inline bool same_nonfinite(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return true;
}

}  // namespace kprop
