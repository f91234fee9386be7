#include "kprop/tolerance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kprop {
namespace {

// NaN/inf positions must agree; returns false (with a message) if not.
// Elements are named by offset + their index (a group of a larger tensor).
bool nonfinite_agree(std::span<const double> ref, std::span<const double> got, ToleranceReport& r,
                     size_t offset = 0) {
  if (ref.size() != got.size()) {
    r.ok = false;
    r.message = fmt::format("length {} != reference length {}", got.size(), ref.size());
    return false;
  }
  for (size_t i = 0; i < ref.size(); ++i)
    if (!same_nonfinite(ref[i], got[i])) {
      r.ok = false;
      r.worst_index = offset + i;
      // A NaN or inf where the reference has something else is an unbounded
      // error, not 0 (which is what an unset error would print).
      r.target_error = std::numeric_limits<double>::infinity();
      r.message = fmt::format("element {}: {} where the reference has {}", offset + i, got[i], ref[i]);
      return false;
    }
  return true;
}

double max_error(std::span<const double> ref, std::span<const double> got, size_t* where) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    const double e = std::fabs(got[i] - ref[i]);
    if (e > worst) worst = e, *where = i;
  }
  return worst;
}

}  // namespace

namespace {
// compare_with_baseline on reference[offset, offset + n), naming elements
// by their index in the whole tensor.
ToleranceReport compare_range(std::span<const double> reference, std::span<const double> target,
                              std::span<const double> naive, double k, double abs_floor, size_t offset,
                              const std::string& where) {
  ToleranceReport r;
  if (!nonfinite_agree(reference, target, r, offset)) return r;
  // The baseline's error over the elements where it is finite: one that
  // overflowed where the reference did not (an intermediate past the dtype's
  // range) would make the budget k·inf and pass any target. Those elements
  // are still judged, by the others' budget (a family whose baseline can
  // overflow leaves them out itself, as op's close(k=) does).
  if (naive.size() == reference.size())
    for (size_t i = 0; i < reference.size(); ++i)
      if (std::isfinite(reference[i]) && std::isfinite(naive[i]))
        r.baseline_error = std::max(r.baseline_error, std::fabs(naive[i] - reference[i]));
  r.target_error = max_error(reference, target, &r.worst_index);
  r.worst_index += offset;
  r.allowed = k * r.baseline_error + abs_floor;
  if (!(r.target_error <= r.allowed)) {
    r.ok = false;
    r.message =
        fmt::format("max error {:.3g} at element {} exceeds {:g} x naive error {:.3g} + floor {:.3g}{}",
                    r.target_error, r.worst_index, k, r.baseline_error, abs_floor, where);
  }
  return r;
}
}  // namespace

ToleranceReport compare_with_baseline(std::span<const double> reference, std::span<const double> target,
                                      std::span<const double> naive, double k, double abs_floor) {
  return compare_range(reference, target, naive, k, abs_floor, 0, "");
}

ToleranceReport compare_with_baseline(std::span<const double> reference, std::span<const double> target,
                                      std::span<const double> naive, double k,
                                      std::span<const double> floors) {
  const size_t groups = floors.size();
  if (groups <= 1 || reference.size() % groups != 0 || target.size() != reference.size()) {
    const double largest = groups ? *std::max_element(floors.begin(), floors.end()) : 0.0;
    return compare_with_baseline(reference, target, naive, k, largest);
  }
  const size_t n = reference.size() / groups;
  const bool with_naive = naive.size() == reference.size();
  ToleranceReport worst;
  bool first = true;
  for (size_t g = 0; g < groups; ++g) {
    ToleranceReport r = compare_range(reference.subspan(g * n, n), target.subspan(g * n, n),
                                      with_naive ? naive.subspan(g * n, n) : std::span<const double>{}, k,
                                      floors[g], g * n, fmt::format(" (its group, {} of {})", g + 1, groups));
    // A failing group before any passing one; among equals, the larger
    // error ratio (an infinite error first).
    const bool worse =
        first || (!r.ok && worst.ok) || (r.ok == worst.ok && error_ratio(r) > error_ratio(worst));
    if (worse) worst = std::move(r);
    first = false;
  }
  return worst;
}

std::vector<double> recentred(const std::vector<double>& naive, const std::vector<double>& own,
                              const std::vector<double>& oracle) {
  if (own.size() != naive.size() || oracle.size() != naive.size()) return naive;
  std::vector<double> out(naive.size());
  for (size_t i = 0; i < naive.size(); ++i) out[i] = oracle[i] + (naive[i] - own[i]);
  return out;
}

ToleranceReport compare_close(std::span<const double> reference, std::span<const double> target, double atol,
                              double rtol, size_t offset) {
  ToleranceReport r;
  if (!nonfinite_agree(reference, target, r, offset)) return r;
  double worst_excess = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (!std::isfinite(reference[i])) continue;
    const double e = std::fabs(target[i] - reference[i]);
    const double allowed = allowed_error(atol, rtol, std::fabs(reference[i]));
    r.target_error = std::max(r.target_error, e);
    if (e > allowed && e - allowed >= worst_excess) {
      worst_excess = e - allowed;
      r.ok = false;
      r.worst_index = i;
      r.allowed = allowed;
    }
  }
  if (!r.ok) {
    r.message = fmt::format("element {}: {} vs reference {} (error {:.3g} > allowed {:.3g})",
                            offset + r.worst_index, target[r.worst_index], reference[r.worst_index],
                            std::fabs(target[r.worst_index] - reference[r.worst_index]), r.allowed);
    r.worst_index += offset;
  }
  return r;
}

namespace field {
Field atol(double fallback, std::string doc, double max) {
  return real("atol", fallback, 0, max, std::move(doc));
}
Field rtol(double fallback, std::string doc) {
  return real("rtol", fallback, 0, 1, std::move(doc));
}
Field k(double fallback, std::string doc, double min) {
  return real("k", fallback, min, 1e6, std::move(doc));
}
Field tolerance(double atol_fallback, double rtol_fallback, std::string doc, std::string atol_doc,
                std::string rtol_doc) {
  return map("tol", {atol(atol_fallback, std::move(atol_doc)), rtol(rtol_fallback, std::move(rtol_doc))},
             std::move(doc));
}
}  // namespace field

}  // namespace kprop
