// attention.fwd / attention.bwd for kernels built elsewhere: each case as a
// request of the ops "attention.fwd" / "attention.bwd" (field names and
// layouts of include/kprop/abi/attention.h), for plugins and workers alike.
#include "kernels/attention/attention.h"
#include "kprop/enum_names.h"
#include "properties/attention/family.h"

namespace kprop::attention {
namespace {

using external::Message;

int32_t abi_mask(MaskKind kind) {
  static constexpr EnumValue<MaskKind, int32_t> kCodes[] = {{MaskKind::none, KPROP_MASK_NONE},
                                                            {MaskKind::causal, KPROP_MASK_CAUSAL},
                                                            {MaskKind::key_padding, KPROP_MASK_KEY_PADDING},
                                                            {MaskKind::boolean, KPROP_MASK_BOOLEAN}};
  static_assert(std::size(kCodes) == size_t(MaskKind::boolean) + 1 && in_enum_order(kCodes));
  return kCodes[static_cast<size_t>(kind)].value;
}

std::vector<int64_t> q_shape(const Shape& s) {
  return {s.batch, s.heads_q, s.nq, s.dim};
}
std::vector<int64_t> kv_shape(const Shape& s) {
  return {s.batch, s.heads_kv, s.nk, s.dim};
}
std::vector<int64_t> row_shape(const Shape& s) {
  return {s.batch, s.heads_q, s.nq};
}

// The inputs both ops share.
Message request(const Case& c, const char* op) {
  const Shape& s = c.shape;
  const int32_t dt = external::abi_dtype(c.dtype);
  Message m;
  m.op = op;
  m.input(external::Tensor::of("q", dt, q_shape(s), c.q))
      .input(external::Tensor::of("k", dt, kv_shape(s), c.k))
      .input(external::Tensor::of("v", dt, kv_shape(s), c.v));
  if (c.mask == MaskKind::key_padding) {
    const std::vector<int64_t> lengths(c.key_lengths.begin(), c.key_lengths.end());
    m.input(external::Tensor::of_ints("key_lengths", KPROP_I32, {s.batch}, lengths));
  }
  if (c.mask == MaskKind::boolean) {
    const std::vector<int64_t> allowed(c.allowed.begin(), c.allowed.end());
    m.input(external::Tensor::of_ints("allowed", KPROP_U8, {s.batch, s.nq, s.nk}, allowed));
  }
  m.attrs = {{"mask", abi_mask(c.mask)},
             {"block_q", c.block_q},
             {"block_k", c.block_k},
             {"scale", effective_scale(c)}};
  return m;
}

FwdResult drive_forward(const Case& c, external::Transport& target) {
  Message m = request(c, "attention.fwd");
  const int32_t dt = external::abi_dtype(c.dtype);
  m.output("o", dt, q_shape(c.shape))
      .output("lse", external::abi_dtype(stats_dtype(c.dtype)), row_shape(c.shape));
  const Message reply = target.call(m);
  FwdResult r;
  external::read_outputs(reply, {KPROP_NAMED(r, o), KPROP_NAMED(r, lse)});
  return r;  // workspace_peak stays 0: not observable (workspace_bounded is n/a)
}

// The backward gets O and LSE of the fp64 reference forward, rounded to the
// case's dtype (LSE to f32 for f16/bf16 cases), as FlashAttention's backward
// gets them from its forward. An oracle (--reference exec:/plugin:) gets
// them unrounded: they are its reference.o and reference.lse, which the
// fp64 identities (d_identity_expr) read; rounded, every f16/bf16 case
// failed them, blamed on the target.
BwdResult drive_backward(const Case& c, external::Transport& target) {
  const FwdResult fwd = reference_forward(c);
  BwdResult r;
  r.o = fwd.o;
  r.lse = fwd.lse;
  if (!target.widens()) {
    for (double& x : r.o) x = round_to(c.dtype, x);
    for (double& x : r.lse) x = round_to(stats_dtype(c.dtype), x);
  }
  Message m = request(c, "attention.bwd");
  const int32_t dt = external::abi_dtype(c.dtype), stats = external::abi_dtype(stats_dtype(c.dtype));
  // Encoded in f64 for an oracle: a tensor of the case's dtype holds its
  // values rounded, whatever the transport widens afterwards.
  const int32_t o_dt = target.widens() ? KPROP_F64 : dt, lse_dt = target.widens() ? KPROP_F64 : stats;
  m.input(external::Tensor::of("o", o_dt, q_shape(c.shape), r.o))
      .input(external::Tensor::of("lse", lse_dt, row_shape(c.shape), r.lse))
      .input(external::Tensor::of("d_out", dt, q_shape(c.shape), c.d_out));
  m.output("d", stats, row_shape(c.shape))
      .output("dq", dt, q_shape(c.shape))
      .output("dk", dt, kv_shape(c.shape))
      .output("dv", dt, kv_shape(c.shape));
  const Message reply = target.call(m);
  external::read_outputs(reply,
                         {KPROP_NAMED(r, d), KPROP_NAMED(r, dq), KPROP_NAMED(r, dk), KPROP_NAMED(r, dv)});
  return r;
}

template <typename Args>
void shared_args(Args& a, const Message& req) {
  using external::in_view;
  external::in_views(req, {KPROP_NAMED(a, q), KPROP_NAMED(a, k), KPROP_NAMED(a, v)});
  a.key_lengths = in_view(req, "key_lengths", true);
  a.allowed = in_view(req, "allowed", true);
  external::in_attrs(
      req, {KPROP_NAMED(a, mask), KPROP_NAMED(a, block_q), KPROP_NAMED(a, block_k), KPROP_NAMED(a, scale)});
}

void invoke_forward(void* fn, const Message& req, Message& reply) {
  kprop_attention_fwd_args a{};
  shared_args(a, req);
  external::out_views(reply, {KPROP_NAMED(a, o), KPROP_NAMED(a, lse)});
  external::call_entry(fn, a, req.op);
}

void invoke_backward(void* fn, const Message& req, Message& reply) {
  kprop_attention_bwd_args a{};
  shared_args(a, req);
  external::in_views(req, {KPROP_NAMED(a, o), KPROP_NAMED(a, lse), KPROP_NAMED(a, d_out)});
  external::out_views(reply, {KPROP_NAMED(a, d), KPROP_NAMED(a, dq), KPROP_NAMED(a, dk), KPROP_NAMED(a, dv)});
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_forward_external(FamilyDef<FwdTraits>& f) {
  f.external({{"attention.fwd", "kprop_attention_fwd", invoke_forward, {"o", "lse"}}}, drive_forward);
}
void register_backward_external(FamilyDef<BwdTraits>& f) {
  f.external({{"attention.bwd", "kprop_attention_bwd", invoke_backward, {"d", "dq", "dk", "dv"}}},
             drive_backward);
}

}  // namespace kprop::attention
