// dflash for kernels built elsewhere: each verification cycle as the two ops
// of include/kprop/abi/dflash.h ("dflash.tree_inputs", then kprop's own
// model under the target's mask and position ids, then "dflash.verify"),
// for plugins and workers alike. The drive rebuilds a full CycleTrace per
// cycle, so every invariant of the family observes an external target.
#include <fmt/format.h>

#include "properties/dflash/family.h"

namespace kprop::dflash {
namespace {

using external::Message;
using external::TargetFailure;

std::vector<int64_t> widen(const std::vector<int>& v) {
  return {v.begin(), v.end()};
}

Message tree_request(const char* op, const DraftTree& tree) {
  const int64_t N = tree.size();
  Message m;
  m.op = op;
  m.input(external::Tensor::of_ints("tokens", KPROP_I32, {N}, widen(tree.tokens)))
      .input(external::Tensor::of_ints("parents", KPROP_I32, {N}, widen(tree.parents)));
  return m;
}

// An i32 output as ints.
std::vector<int> ints_of(const Message& reply, const std::string& name) {
  std::vector<int> out;
  for (int64_t v : reply.tensor(name).to_ints()) out.push_back(static_cast<int>(v));
  return out;
}

// Op 1: position ids and mask of the tree, straight into the trace; the
// invariants judge them, and kprop's model runs under them.
void tree_inputs(external::Transport& target, const DraftTree& tree, int P, CycleTrace& trace) {
  const int64_t N = tree.size();
  Message m = tree_request("dflash.tree_inputs", tree);
  m.attrs = {{"context_length", P}};
  m.output("position_ids", KPROP_I32, {N}).output("mask", KPROP_U8, {N, P + N});
  const Message reply = target.call(m);
  trace.context_length = P;
  trace.position_ids = ints_of(reply, "position_ids");
  const auto mask = reply.tensor("mask").to_flags(m.op);
  trace.mask.assign(mask.begin(), mask.end());
}

// Op 3: accepted path and bonus token. The accepted nodes and the bonus feed
// kprop's next cycle, so values that could not index the tree or the
// vocabulary are a target error, not a verdict.
void verify(external::Transport& target, const DraftTree& tree, int vocab, CycleTrace& trace) {
  const int64_t N = tree.size();
  Message m = tree_request("dflash.verify", tree);
  std::vector<double> logits;
  for (const Logits& row : trace.logits) logits.insert(logits.end(), row.begin(), row.end());
  m.input(external::Tensor::of("logits", KPROP_F64, {N + 1, vocab}, logits));
  m.output("accepted", KPROP_I32, {N}).output("bonus", KPROP_I32, {1});
  const Message reply = target.call(m);

  const std::vector<int> accepted = ints_of(reply, "accepted");
  trace.accepted.clear();
  trace.emitted.clear();
  size_t k = 0;
  for (; k < accepted.size() && accepted[k] != -1; ++k) {
    if (accepted[k] < 0 || accepted[k] >= N)
      throw TargetFailure("error",
                          fmt::format("dflash.verify: accepted[{}] = {} is not a node of the {}-node tree", k,
                                      accepted[k], N));
    trace.accepted.push_back(accepted[k]);
    trace.emitted.push_back(tree.tokens[static_cast<size_t>(accepted[k])]);
  }
  for (size_t pad = k; pad < accepted.size(); ++pad)
    if (accepted[pad] != -1)
      throw TargetFailure(
          "error", fmt::format("dflash.verify: accepted[{}] = {} after the -1 padding began at {}", pad,
                               accepted[pad], k));
  const int bonus = ints_of(reply, "bonus").at(0);
  if (bonus < -1 || bonus >= vocab)
    throw TargetFailure(
        "error",
        fmt::format("dflash.verify: bonus token {} is outside the vocabulary [0, {})", bonus, vocab));
  if (bonus != -1) trace.emitted.push_back(bonus);
}

Result drive(const Case& c, external::Transport& target) {
  const auto shared_model = TinyLM::shared(c.model);
  const TinyLM& model = *shared_model;
  Result result;
  std::vector<int> context = c.prompt;
  for (const DraftTree& tree : c.cycles) {
    CycleTrace trace;
    tree_inputs(target, tree, static_cast<int>(context.size()), trace);
    // The forward pass of the serving engine, under the target's tree inputs.
    trace.logits = tree_forward(model, context, tree, trace.position_ids, trace.mask);
    verify(target, tree, c.model.vocab, trace);
    context.insert(context.end(), trace.emitted.begin(), trace.emitted.end());
    result.output.insert(result.output.end(), trace.emitted.begin(), trace.emitted.end());
    result.cycles.push_back(std::move(trace));
  }
  return result;
}

void invoke_tree_inputs(void* fn, const Message& req, Message& reply) {
  kprop_dflash_tree_inputs_args a{};
  a.tokens = external::in_view(req, "tokens");
  a.parents = external::in_view(req, "parents");
  external::in_attrs(req, {KPROP_NAMED(a, context_length)});
  a.position_ids = external::out_view(reply, "position_ids");
  a.mask = external::out_view(reply, "mask");
  external::call_entry(fn, a, req.op);
}

void invoke_verify(void* fn, const Message& req, Message& reply) {
  kprop_dflash_verify_args a{};
  external::in_views(req, {KPROP_NAMED(a, tokens), KPROP_NAMED(a, parents), KPROP_NAMED(a, logits)});
  a.accepted = external::out_view(reply, "accepted");
  a.bonus = external::out_view(reply, "bonus");
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_external(FamilyDef<Traits>& f) {
  f.external(
      {{"dflash.tree_inputs", "kprop_dflash_tree_inputs", invoke_tree_inputs, {"position_ids", "mask"}},
       {"dflash.verify", "kprop_dflash_verify", invoke_verify, {"accepted", "bonus"}}},
      drive);
}

}  // namespace kprop::dflash
