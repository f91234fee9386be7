// Helpers of the external-target tests that put kprop's own kernels behind
// the C ABI (include/kprop/abi.h): an element of a float view of any dtype,
// read or stored through its strides, the options of a short fixed run and
// whether it was killed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iterator>

#include "kprop/abi.h"
#include "kprop/half.h"
#include "kprop/runner.h"
#include "kprop/testing.h"

namespace kprop::testing {

// Element `index` of a float view (f32, f64, f16, bf16), as a double.
inline double element(const kprop_tensor& t, std::initializer_list<int64_t> index) {
  const int64_t i = kprop_offset(&t, std::data(index));
  switch (t.dtype) {
    case KPROP_F32:
      return static_cast<const float*>(t.data)[i];
    case KPROP_F16:
      return half::f16_to_double(static_cast<const uint16_t*>(t.data)[i]);
    case KPROP_BF16:
      return half::bf16_to_double(static_cast<const uint16_t*>(t.data)[i]);
    default:
      return static_cast<const double*>(t.data)[i];
  }
}

// x rounded to the view's dtype (to nearest even) and stored at `index`.
inline void store(const kprop_tensor& t, std::initializer_list<int64_t> index, double x) {
  const int64_t i = kprop_offset(&t, std::data(index));
  if (t.dtype == KPROP_F32)
    static_cast<float*>(t.data)[i] = static_cast<float>(x);
  else if (t.dtype == KPROP_F16)
    static_cast<uint16_t*>(t.data)[i] = half::f16_from_double(x);
  else if (t.dtype == KPROP_BF16)
    static_cast<uint16_t*>(t.data)[i] = half::bf16_from_double(x);
  else
    static_cast<double*>(t.data)[i] = x;
}

// `trials` cases of a fixed seed, nothing written; `bug`: a planted bug,
// shrunk for the first invariant it breaks only.
inline RunOptions quick(bool bug = false, int64_t trials = 100) {
  RunOptions o;
  o.stop_on_first_failure = bug;
  o.seed = 20261122;
  o.trials = trials;
  o.write_corpus = false;
  return o;
}

// A run an invariant killed, with a counterexample.
inline bool has_counterexample(const RunReport& report) {
  return !killed_by(report).empty();
}

}  // namespace kprop::testing
