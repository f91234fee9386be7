// kvcache for engines built elsewhere: each case as one "kvcache.serve"
// request (field names and layouts of include/kprop/abi/kvcache.h): the
// whole workload's Q/K/V packed sequence after sequence, the schedule and the
// cache configuration; the reply is every token's attention output. The
// engine owns its cache, so all of the family's cache-management bugs stay
// expressible (and checkable) outside kprop.
//
// dtypes (kernels/kvcache/kvcache.h, Precision): q and out travel in the
// case's dtype (KPROP_F64, KPROP_F32, KPROP_F16 or KPROP_BF16); k and v in
// f64 for f64 cases, else in f32 (as they arrive at the cache write, which
// rounds them to the dtype). The reply's cache_dtype must be the case's
// dtype, or KPROP_I8 for an int8 cache on an f64 case; an engine that lacks
// a dtype answers KPROP_UNSUPPORTED (the case is declined, not passed).
// An f64 case's exact int8 ties (Case::int8_ties) travel as its k and v
// values (batch_data, the values the reference quantizes), unrounded in f64;
// an f16/bf16 case's dtype ties (Case::store_ties) travel in k and v's f32,
// which holds them exactly, for the kernel's cache write to round.
#include <fmt/format.h>

#include <cmath>

#include "properties/kvcache/family.h"

namespace kprop::kvcache {
namespace {

using external::Message;

Result drive(const Case& c, external::Transport& target) {
  const int64_t B = static_cast<int64_t>(c.seqs.size()), Hq = c.q_heads(), Hkv = c.kv_heads, D = c.head_dim;
  auto [q, k, v] = batch_data(c);
  // An oracle (--reference exec:/plugin:) is told nothing of the case's
  // dtype (its inputs travel in f64): it gets K/V as the dtype's cache holds
  // them, the values the fp64 reference attends over.
  if (target.widens() && c.dtype != DType::f64)
    for (auto* x : {&k, &v})
      for (double& e : *x) e = round_to(c.dtype, e);
  std::vector<int64_t> starts{0}, prompts, arrivals;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    starts.push_back(starts.back() + c.seqs[b].tokens());
    prompts.push_back(c.seqs[b].prompt);
    arrivals.push_back(c.seqs[b].arrive);
  }
  const int64_t N = starts.back();
  const ChannelRanges range = channel_ranges(c);
  const std::vector<int64_t> order(c.pool.begin(), c.pool.end());
  const int32_t dt = external::abi_dtype(c.dtype), kv_dt = c.dtype == DType::f64 ? KPROP_F64 : KPROP_F32;
  Message m;
  m.op = "kvcache.serve";
  m.input(external::Tensor::of("q", dt, {N, Hq, D}, q))
      .input(external::Tensor::of("k", kv_dt, {N, Hkv, D}, k))
      .input(external::Tensor::of("v", kv_dt, {N, Hkv, D}, v))
      .input(external::Tensor::of_ints("seq_starts", KPROP_I32, {B + 1}, starts))
      .input(external::Tensor::of_ints("prompt_lens", KPROP_I32, {B}, prompts))
      .input(external::Tensor::of_ints("arrivals", KPROP_I32, {B}, arrivals))
      .input(external::Tensor::of("k_range", KPROP_F64, {Hkv, D}, range.k))
      .input(external::Tensor::of("v_range", KPROP_F64, {Hkv, D}, range.v))
      .input(
          external::Tensor::of_ints("block_order", KPROP_I32, {static_cast<int64_t>(order.size())}, order));
  m.attrs = {{"page_size", c.page_size},
             {"chunk", c.chunk},
             {"poison", c.poison == Poison::nan ? KPROP_KVCACHE_POISON_NAN : KPROP_KVCACHE_POISON_HUGE},
             {"scale", 1 / std::sqrt(static_cast<double>(D))}};
  m.output("out", dt, {N, Hq, D}).output("cache_dtype", KPROP_I32, {1});
  const Message reply = target.call(m);

  Result r;
  const int64_t cache_dtype = reply.tensor("cache_dtype").to_ints()[0];
  // An oracle (--reference exec:/plugin:) gets the inputs in f64 whatever
  // the case's dtype, so it answers as an f64 case does.
  const bool f64_inputs = c.dtype == DType::f64 || target.widens();
  if (f64_inputs && cache_dtype != KPROP_F64 && cache_dtype != KPROP_I8)
    throw external::TargetFailure(
        "error", fmt::format("kvcache.serve: cache_dtype {} is neither KPROP_F64 ({}) nor KPROP_I8 ({})",
                             cache_dtype, int{KPROP_F64}, int{KPROP_I8}));
  if (!f64_inputs && cache_dtype != dt)
    throw external::TargetFailure(
        "error", fmt::format("kvcache.serve: a {} case's cache_dtype must be {}, not {}", dtype_name(c.dtype),
                             dt, cache_dtype));
  r.int8_cache = cache_dtype == KPROP_I8;
  const std::vector<double> out = reply.tensor("out").to_doubles();
  const size_t row = static_cast<size_t>(Hq * D);
  for (size_t b = 0; b < c.seqs.size(); ++b)
    r.out.emplace_back(out.begin() + static_cast<long>(static_cast<size_t>(starts[b]) * row),
                       out.begin() + static_cast<long>(static_cast<size_t>(starts[b + 1]) * row));
  return r;  // blocks_allocated / blocks_reused stay 0: the engine's own bookkeeping
}

void invoke_serve(void* fn, const Message& req, Message& reply) {
  kprop_kvcache_serve_args a{};
  external::in_views(req, {KPROP_NAMED(a, q), KPROP_NAMED(a, k), KPROP_NAMED(a, v),
                           KPROP_NAMED(a, seq_starts), KPROP_NAMED(a, prompt_lens), KPROP_NAMED(a, arrivals),
                           KPROP_NAMED(a, k_range), KPROP_NAMED(a, v_range), KPROP_NAMED(a, block_order)});
  external::in_attrs(
      req, {KPROP_NAMED(a, page_size), KPROP_NAMED(a, chunk), KPROP_NAMED(a, poison), KPROP_NAMED(a, scale)});
  external::out_views(reply, {KPROP_NAMED(a, out), KPROP_NAMED(a, cache_dtype)});
  external::call_entry(fn, a, req.op);
}

}  // namespace

void register_external(FamilyDef<Traits>& f) {
  f.external({{"kvcache.serve", "kprop_kvcache_serve", invoke_serve, {"out", "cache_dtype"}}}, drive);
}

}  // namespace kprop::kvcache
