// The `deterministic` invariant: the target run twice on the same case gives
// bitwise-identical outputs. GPU kernels are where this breaks (atomics in a
// reduction order that depends on scheduling, a race, a read of memory
// nothing wrote); a forward kernel must be deterministic. A target that is
// nondeterministic by design (atomicAdd accumulation, ImplInfo::deterministic
// false) is classified n/a here — its outputs are still held to the
// reference's tolerance by every other invariant — and so reported, never
// failed and never counted as a pass.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kprop/family.h"

namespace kprop {

// A named output as flat doubles: a view of a result's own doubles (no
// copy: at a real model's sizes the copies of both runs' outputs were a
// quarter of a case's peak memory), or ints widened exactly into its own.
class OutputView {
 public:
  OutputView(std::string name, const std::vector<double>& values) : name(std::move(name)), values(values) {}
  OutputView(std::string name, std::vector<double>&& widened)
      : name(std::move(name)), owned_(std::move(widened)), values(owned_) {}
  OutputView(std::string name, std::initializer_list<double> widened)
      : OutputView(std::move(name), std::vector<double>(widened)) {}
  OutputView(const OutputView& o)
      : name(o.name), owned_(o.owned_), values(o.owns() ? std::span<const double>(owned_) : o.values) {}
  OutputView(OutputView&& o) noexcept
      : name(std::move(o.name)),
        owned_(std::move(o.owned_)),
        values(o.values) {}  // (a moved vector keeps its buffer)
  OutputView& operator=(const OutputView&) = delete;
  OutputView& operator=(OutputView&&) = delete;

  std::string name;

 private:
  bool owns() const { return !owned_.empty() && values.data() == owned_.data(); }
  std::vector<double> owned_;

 public:
  std::span<const double> values;
};

namespace detail {
// First index where a and b differ (same_run_value, kprop/family.h), or -1.
inline int64_t first_bit_difference(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_run_value(a[i], b[i])) return static_cast<int64_t>(i);
  return -1;
}
}  // namespace detail

// Registers `deterministic` for a family; `outputs` lists a result's outputs.
template <typename Traits, typename Outputs>
void register_deterministic(FamilyDef<Traits>& f, Outputs outputs) {
  f.invariant(
       {"deterministic",
        "two runs of the target on the same case give bitwise-identical outputs, any NaN equal to any NaN "
        "(n/a for a target "
        "declared nondeterministic, e.g. atomics; its outputs are checked within tolerance elsewhere)",
        {}},
       [outputs](Trial<Traits>& t, const Values&) {
         if (!t.target_info().deterministic)
           return Verdict::not_applicable("target " + t.target_info().name +
                                          " is nondeterministic by design; checked within tolerance only");
         const std::vector<OutputView> first = outputs(t.target());
         const auto again = t.run_target(t.input());  // (the views of `second` read it)
         const std::vector<OutputView> second = outputs(again);
         for (size_t k = 0; k < first.size() && k < second.size(); ++k) {
           const int64_t i = detail::first_bit_difference(first[k].values, second[k].values);
           if (i < 0) continue;
           const auto at = static_cast<size_t>(i);
           const double a = at < first[k].values.size() ? first[k].values[at] : 0;
           const double b = at < second[k].values.size() ? second[k].values[at] : 0;
           return Verdict::fail(fmt::format("{}[{}] differs between two runs on the same case: {} then {}",
                                            first[k].name, i, a, b),
                                {{"index", double(i)}, {"first", a}, {"second", b}});
         }
         return Verdict::pass();
       })
      .reading({"*"});
}

}  // namespace kprop
