// softmax_topk for kernels built elsewhere: each case as one request of the
// op "softmax_topk" (field names and layouts of
// include/kprop/abi/softmax_topk.h), for plugins and workers alike. The
// result is the op's two outputs, so every invariant observes an external
// kernel exactly as it observes `fused`.
#include "properties/softmax_topk/family.h"

namespace kprop::softmax_topk {
namespace {

using external::Message;

Result drive(const Case& c, external::Transport& target) {
  const int32_t dt = external::abi_dtype(c.dtype);
  const std::vector<int64_t> top = {c.rows(), c.k};
  Message m;
  m.op = "softmax_topk";
  m.input(external::Tensor::of("logits", dt, {c.rows(), c.vocab}, c.logits));
  m.attrs = {{"k", c.k}, {"block", c.block}};
  m.output("probs", dt, top).output("indices", KPROP_I32, top);
  const Message reply = target.call(m);
  Result r;
  r.probs = reply.tensor("probs").to_doubles();
  for (int64_t i : reply.tensor("indices").to_ints()) r.indices.push_back(static_cast<int>(i));
  return r;
}

void invoke(void* fn, const Message& req, Message& reply) {
  kprop_softmax_topk_args a{};
  a.logits = external::in_view(req, "logits");
  external::in_attrs(req, {KPROP_NAMED(a, k), KPROP_NAMED(a, block)});
  a.probs = external::out_view(reply, "probs");
  a.indices = external::out_view(reply, "indices");
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_external(FamilyDef<Traits>& f) {
  f.external({{"softmax_topk", "kprop_softmax_topk", invoke, {"probs", "indices"}}}, drive);
}

}  // namespace kprop::softmax_topk
