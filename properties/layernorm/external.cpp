// layernorm for kernels built elsewhere: each case as one request of the op
// "layernorm" (field names and layouts of include/kprop/abi/layernorm.h),
// for plugins and workers alike. Every field of Result is an output, so all
// invariants observe an external kernel exactly as they observe `fused`.
#include "properties/layernorm/family.h"

namespace kprop::layernorm {
namespace {

using external::Message;

Result drive(const Case& c, external::Transport& target) {
  // A half case's statistics (mean, rstd) are f32 tensors: the precision
  // contract keeps them in f32 (rstd = 1/sqrt(eps) reaches 1e6, past f16's
  // range).
  const int32_t dt = external::abi_dtype(c.dtype), stats_dt = is_half(c.dtype) ? KPROP_F32 : dt;
  const std::vector<int64_t> matrix = {c.rows, c.dim}, rows = {c.rows}, cols = {c.dim};
  Message m;
  m.op = "layernorm";
  m.input(external::Tensor::of("x", dt, matrix, c.x))
      .input(external::Tensor::of("gamma", dt, cols, c.gamma))
      .input(external::Tensor::of("beta", dt, cols, c.beta))
      .input(external::Tensor::of("dy", dt, matrix, c.dy));
  m.attrs = {{"eps", c.eps}};
  m.output("y", dt, matrix)
      .output("xhat", dt, matrix)
      .output("mean", stats_dt, rows)
      .output("rstd", stats_dt, rows)
      .output("dx", dt, matrix)
      .output("dgamma", dt, cols)
      .output("dbeta", dt, cols);
  const Message reply = target.call(m);
  Result r;
  external::read_outputs(reply,
                         {KPROP_NAMED(r, y), KPROP_NAMED(r, xhat), KPROP_NAMED(r, mean), KPROP_NAMED(r, rstd),
                          KPROP_NAMED(r, dx), KPROP_NAMED(r, dgamma), KPROP_NAMED(r, dbeta)});
  return r;
}

void invoke(void* fn, const Message& req, Message& reply) {
  kprop_layernorm_args a{};
  external::in_views(req,
                     {KPROP_NAMED(a, x), KPROP_NAMED(a, gamma), KPROP_NAMED(a, beta), KPROP_NAMED(a, dy)});
  external::in_attrs(req, {KPROP_NAMED(a, eps)});
  external::out_views(reply,
                      {KPROP_NAMED(a, y), KPROP_NAMED(a, xhat), KPROP_NAMED(a, mean), KPROP_NAMED(a, rstd),
                       KPROP_NAMED(a, dx), KPROP_NAMED(a, dgamma), KPROP_NAMED(a, dbeta)});
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_external(FamilyDef<Traits>& f) {
  f.external(
      {{"layernorm", "kprop_layernorm", invoke, {"y", "xhat", "mean", "rstd", "dx", "dgamma", "dbeta"}}},
      drive);
}

}  // namespace kprop::layernorm
