// The registered implementations: each converts a Case to the typed inputs
// of its precision, runs a typed kernel with a fresh Workspace and widens
// the outputs (typed.h). f16/bf16 cases run the float kernels with
// half-precision Storage. The mutants are in mutants.cpp.
#include "kernels/attention/attention.h"
#include "kernels/attention/typed.h"

namespace kprop::attention {
namespace {

using namespace typed;

// The materialized forward and backward (the backward recomputes P, so it
// reads neither O nor LSE).
template <typename T>
BwdResult run_naive_backward(const Case& c) {
  return run_forward_backward<T>(c, materialized_forward<T>,
                                 [](const Inputs<T>& in, const T*, const T*, Grads<T> grads, Workspace& ws) {
                                   materialized_backward<T>(in, grads, ws);
                                 });
}

}  // namespace

FwdResult tiled(const Case& c) {
  return forward<FwdBug::none>(c);
}
BwdResult tiled_d(const Case& c) {
  return backward<BwdMode::single_pass_d>(c);
}
BwdResult tiled_two_pass(const Case& c) {
  return backward<BwdMode::two_pass>(c);
}

FwdResult naive_forward(const Case& c) {
  const int offset = contract_offset(c);
  return c.dtype == DType::f64 ? run_forward<double>(c, materialized_forward<double>, offset)
                               : run_forward<float>(c, materialized_forward<float>, offset);
}
BwdResult naive_backward(const Case& c) {
  return c.dtype == DType::f64 ? run_naive_backward<double>(c) : run_naive_backward<float>(c);
}

}  // namespace kprop::attention
