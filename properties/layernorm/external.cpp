// layernorm for kernels built elsewhere: each case as one request of the op
// "layernorm" (field names and layouts of include/kprop/abi/layernorm.h),
// for plugins and workers alike. Every field of Result is an output, so all
// invariants observe an external kernel exactly as they observe `fused`.
#include "properties/layernorm/family.h"

namespace kprop::layernorm {
namespace {

using external::Message;
using external::Tensor;

Result drive(const Case& c, external::Transport& target) {
  // A half case's statistics (mean, rstd) are f32 tensors: the precision
  // contract keeps them in f32 (rstd = 1/sqrt(eps) reaches 1e6, past f16's
  // range).
  const int32_t dt = external::abi_dtype(c.dtype), stats_dt = is_half(c.dtype) ? KPROP_F32 : dt;
  const std::vector<int64_t> matrix = {c.rows, c.dim}, rows = {c.rows}, cols = {c.dim};
  Message m;
  m.op = "layernorm";
  m.input(Tensor::of("x", dt, matrix, c.x))
      .input(Tensor::of("gamma", dt, cols, c.gamma))
      .input(Tensor::of("beta", dt, cols, c.beta))
      .input(Tensor::of("dy", dt, matrix, c.dy));
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
  r.y = reply.tensor("y").to_doubles();
  r.xhat = reply.tensor("xhat").to_doubles();
  r.mean = reply.tensor("mean").to_doubles();
  r.rstd = reply.tensor("rstd").to_doubles();
  r.dx = reply.tensor("dx").to_doubles();
  r.dgamma = reply.tensor("dgamma").to_doubles();
  r.dbeta = reply.tensor("dbeta").to_doubles();
  return r;
}

void invoke(void* fn, const Message& req, Message& reply) {
  using external::in_view;
  using external::out_view;
  kprop_layernorm_args a{};
  a.x = in_view(req, "x");
  a.gamma = in_view(req, "gamma");
  a.beta = in_view(req, "beta");
  a.dy = in_view(req, "dy");
  a.eps = req.attrs.at("eps").get<double>();
  a.y = out_view(reply, "y");
  a.xhat = out_view(reply, "xhat");
  a.mean = out_view(reply, "mean");
  a.rstd = out_view(reply, "rstd");
  a.dx = out_view(reply, "dx");
  a.dgamma = out_view(reply, "dgamma");
  a.dbeta = out_view(reply, "dbeta");
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_external(FamilyDef<Traits>& f) {
  f.external(
      {{"layernorm", "kprop_layernorm", invoke, {"y", "xhat", "mean", "rstd", "dx", "dgamma", "dbeta"}}},
      drive);
}

}  // namespace kprop::layernorm
