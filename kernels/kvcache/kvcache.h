// KV cache: a batch of sequences prefilled, then decoded step by step through a
// KV cache, with the attention output of every token (docs/FAMILIES.md, kvcache).
//
// Contract. Sequence b has a prompt of P_b >= 1 tokens and S_b >= 0 decode
// steps (T_b = P_b + S_b tokens) and arrives at scheduler step a_b. Each token
// t has a query [Hq, D] and a key and value [Hkv, D] (GQA: Hq = group * Hkv,
// query head h reads kv head h / group), all drawn from the sequence's seed.
// The output of token t is softmax(q_t · K[0..t]^T / sqrt(D)) V[0..t] per
// query head: causal, the sequence's own tokens only. The reference computes
// exactly that from scratch for every token (fp64, two-pass softmax).
//
// The cached implementations run a scheduler: at step a_b the prompt is
// prefilled (in one go, or one chunk per step for chunked prefill), then one
// token is decoded per step; a sequence finishes at the step of its last
// token and its cache blocks are released at the end of that step. Within a
// step every scheduled token's K/V is written to the cache first, then every
// scheduled token attends through the cache. Unused cache slots hold poison
// (NaN, or K = 0 with V = 1e30 so a leaked slot always carries weight; the
// int8 cache holds the invalid code -128), and
// released paged blocks keep their stale contents: nothing outside a
// sequence's first t + 1 slots may influence token t.
//
// int8 cache: static per-channel scales, s[h][d] = range[h][d] / 127, from
// each channel's calibrated range (the case's channel ranges; every K/V
// element lies within its channel's range, so nothing clips). Codes are
// the double quotient x / s rounded to the nearest integer, ties (x / s =
// k + 1/2 exactly) to even (std::nearbyint in the default rounding mode; not
// std::round, which takes ties away from zero), clamped to [-127, 127];
// attention dequantizes code * s. Cases with int8_ties > 0 put K/V elements
// exactly on such ties (x / s == k + 1/2 in double, against this s).
// Likewise f16/bf16 cases with store_ties > 0 put K/V elements exactly
// halfway between two values of the dtype (f32 values: the cache write
// rounds them to even). Cases with negative_scores put every score of kv
// head 0 far below zero (Case::negative_scores): all-underflowing exps,
// which a softmax whose running max starts at 0 rather than -inf turns into
// 0 / 0.
//
// Precision (the case's dtype; an fp16/bf16 KV cache as vLLM and FlashInfer
// keep it). f64 cases are what the family always did: data, caches and
// attention all fp64. f32, f16 and bf16 cases: Q is drawn in the dtype (its
// values are exactly representable); the new tokens' K and V arrive as f32
// (the f32 output of the projection / RoPE that a fused append kernel writes)
// and the cache write rounds them to the dtype, to nearest, ties to even, so
// the cache holds dtype values; attention computes in f32 (the scores, the
// softmax max and sum, the rescale, the P·V accumulator, P itself stays f32:
// a decode kernel on CUDA cores), and each output is rounded to the dtype
// when stored. The reference sees the same inputs: Q and the cache's rounded
// K/V (stored_data), in fp64. The int8 cache quantizes fp64 K/V and takes f64
// cases only: it declines the others (Unsupported). Unused slots of a
// non-f64 cache hold the dtype's poison: NaN, or V = the dtype's value of
// 1e30 (65504, its largest finite value, for f16).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kprop/float_type.h"
#include "kprop/mutant.h"

namespace kprop::kvcache {

enum class Poison { nan, huge };
// The case's dtype: f32, f64, f16, bf16 (kprop/float_type.h: names, rounding,
// constants).
using DType = FloatType;
// Unit roundoff of the dtype's storage: 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16), 0 (f64).
double storage_roundoff(DType d);
// Half the dtype's smallest subnormal: the absolute error of rounding a tiny value (0 for f64).
double storage_tiny(DType d);

struct Sequence {
  int prompt = 1;     // P >= 1 tokens prefilled
  int decode = 0;     // S >= 0 tokens decoded one per step
  int arrive = 0;     // scheduler step of the prefill (or its first chunk)
  uint64_t seed = 1;  // this sequence's Q, K, V
  int tokens() const { return prompt + decode; }
  bool operator==(const Sequence&) const = default;
};

struct Case {
  int kv_heads = 1;
  int group = 1;  // query heads per kv head
  int head_dim = 1;
  std::vector<Sequence> seqs;
  int page_size = 1;      // paged layouts: tokens per block
  int chunk = 1;          // chunked prefill: prompt tokens per chunk
  std::vector<int> pool;  // the paged pool's free list at start: a permutation of its blocks
  Poison poison = Poison::nan;
  double q_scale = 1;        // queries are q_scale * N(0, 1)
  double k_spread = 1;       // key channel ranges are log-uniform in [1 / k_spread, 1]
  double v_spread = 1;       // value channel ranges likewise
  uint64_t seed = 1;         // channel ranges
  DType dtype = DType::f64;  // the Precision note above
  // f64 cases: the probability that a K/V element (one of the 95% not drawn
  // 2^-30 off a tie) sits exactly on a rounding tie of its int8 code, x / s
  // == k + 1/2 in double (k even and odd, either sign). 0 (a case written
  // before the field) puts none there.
  double int8_ties = 0;
  // f16/bf16 cases: the probability that a K/V element arrives (in f32)
  // exactly halfway between two neighbouring values of the dtype, where the
  // cache write's round to nearest even differs from rounding ties away
  // from zero or truncating. 0 (a case written before the field) puts none
  // there.
  double store_ties = 0;
  // Every score of kv head 0 far below zero (softmax's exp of every score
  // underflows unless the max is subtracted): its keys share one sign per
  // channel, at least about half their channel's range, and its query
  // heads take the opposite signs, scaled so that each score lies in
  // [-L, -0.225 L], L = 4096 for f64 cases (exp underflows below -745) and
  // 512 for the others (f32 arithmetic: below -104); q_scale plays no part
  // there. The other kv heads keep their data.
  // false (a case written before the field) draws as before.
  bool negative_scores = false;
  int q_heads() const { return kv_heads * group; }
  // Tokens over all sequences (each one's prompt and decode steps).
  int64_t tokens() const {
    int64_t n = 0;
    for (const Sequence& s : seqs) n += s.tokens();
    return n;
  }
  bool operator==(const Case&) const = default;
};

struct Result {
  // Per sequence, by token: out[b][(t * Hq + h) * D + d].
  std::vector<std::vector<double>> out;
  bool int8_cache = false;  // outputs carry int8 quantization error
  int blocks_allocated = 0;
  int blocks_reused = 0;  // allocations that handed out a block released earlier
  // Per sequence, the physical block of each of its logical blocks (pages)
  // at the end of the run; empty when the implementation does not page.
  std::vector<std::vector<int>> block_tables;
};

// ---- data
struct Tensors {
  std::vector<double> q;     // [T][Hq][D]
  std::vector<double> k, v;  // [T][Hkv][D]
};
// What the target is given: Q in the dtype, K and V as they arrive at the
// cache write (f32 for non-f64 cases; see Precision).
Tensors sequence_data(const Case& c, size_t b);
// What the cache holds and attention reads: K and V rounded to the dtype.
Tensors stored_data(const Case& c, size_t b);
// The same, generated once and shared by the readers of a case (the last
// few sequences are kept, kprop/recent.h): what the reference, the engines
// and the invariants read.
std::shared_ptr<const Tensors> shared_sequence_data(const Case& c, size_t b);
std::shared_ptr<const Tensors> shared_stored_data(const Case& c, size_t b);
// Every sequence's sequence_data, one after another on the token axis (the
// layout of external kernels' inputs and of the named tensors).
Tensors batch_data(const Case& c);
struct ChannelRanges {
  std::vector<double> k, v;  // [Hkv][D]: every element of that channel lies in [-range, range]
};
ChannelRanges channel_ranges(const Case& c);
// Per-channel int8 scales (range / 127), or one per tensor (the largest range / 127).
ChannelRanges int8_scales(const Case& c, bool per_tensor = false);
// The contract's int8 code: nearbyint(x / scale) (ties to even), clamped to [-127, 127].
int8_t quantize(double x, double scale);
// The same with the quotient formed in f32 (the int8_quantize_in_f32 mutant).
int8_t quantize_f32(double x, double scale);
// The same with ties rounded away from zero, std::round (the int8_round_half_away mutant).
int8_t quantize_half_away(double x, double scale);
// K and V of `t` replaced by their int8 round trip under `scales`.
Tensors dequantized(const Case& c, Tensors t, const ChannelRanges& scales);

// ---- schedule: which tokens a sequence processes at which step
struct Work {
  int step, begin, end;  // tokens [begin, end) at scheduler step `step`
};
// Prefill in one piece (chunk <= 0) or in chunks of `chunk` tokens, one per
// step, then one decode token per step.
std::vector<Work> schedule(const Sequence& s, int chunk);
// What a batch's sequences do at one step.
struct StepWork {
  std::vector<std::pair<size_t, Work>> work;  // (sequence, its item) due at the step
  std::vector<size_t> finishing;              // sequences whose last item that is
};
// Every sequence's schedule walked together, one step at a time, as the
// cached engines and the CUDA planner run a case.
class BatchSchedule {
 public:
  BatchSchedule(const std::vector<Sequence>& seqs, int chunk);
  int last_step() const { return last_step_; }
  const std::vector<std::vector<Work>>& plans() const { return plans_; }
  // The work due at `step`; steps are taken in order, from 0.
  StepWork take(int step);

 private:
  std::vector<std::vector<Work>> plans_;
  std::vector<size_t> next_;  // each sequence's next item
  int last_step_ = 0;
};

// ---- contract helpers
// Why the case breaks the contract, or "" if it is valid.
std::string validate(const Case& c);
// Blocks the paged pool needs: the peak held at once, under full and chunked prefill.
int blocks_needed(const Case& c);
// The case with its pool grown (new blocks appended to the free list) to what it needs.
Case fit_pool(Case c);
double poison_key(Poison p);
double poison_value(Poison p, DType d = DType::f64);

// ---- implementations
Result reference(const Case& c);
// The reference on the int8 cache's dequantized K/V: what an int8 cache must output.
Result reference_dequantized(const Case& c);
// The same-precision naive baseline: the reference's two-pass computation in
// the precision a non-f64 kernel computes in (f32), output rounded to the
// dtype (f64 cases: the reference).
Result naive(const Case& c);
Result contiguous(const Case& c);
Result paged(const Case& c);
Result chunked_prefill(const Case& c);
Result int8(const Case& c);

// The cached engine with one stage switched to a known bug (mutants.cpp).
enum class Layout { contiguous, paged, int8 };
struct Engine {
  Layout layout = Layout::contiguous;
  bool chunked = false;
  // Mutations; all false is the correct engine.
  bool last_block_offset = false;   // decode write slot taken from the last block before allocating
  bool chunk_ignores_past = false;  // a prefill chunk attends only to itself
  bool decode_off_by_one = false;   // decode attends to the cache before its own token
  bool padding_leak = false;        // decode keys masked by the batch's longest sequence
  bool per_tensor_scale = false;    // one int8 scale per tensor
  bool quantize_in_f32 = false;     // int8 codes round(f32(x) / f32(s)), not the contract's double
  bool round_half_away = false;     // int8 codes std::round(x / s): ties away from zero, not to even
  bool stale_block_reuse = false;   // finishing sequences release blocks before the step's writes
  bool table_entries_4096 = false;  // a block table of 4096 entries: logical block l at entry l mod 4096
  bool no_max = false;              // softmax as exp(s) / sum exp(s): no running max subtracted
  bool max_init_zero = false;       // the running max starts at 0, not -inf: max(0, scores) subtracted
  // Precision mutations (differ from the correct engine on non-f64 cases only):
  bool truncate_bf16 = false;          // bf16 cache written by truncation, not round-to-nearest-even
  bool half_away_bf16 = false;         // bf16 cache and outputs stored by (bits + 0x8000) >> 16: ties away
  bool decode_acc_in_storage = false;  // decode's P·V accumulator and row sum kept in the dtype
  bool scale_in_storage = false;       // the softmax scale 1/sqrt(D) rounded to the dtype
};
Result run(const Case& c, const Engine& engine);

using Mutant = kprop::Mutant<Case, Result>;
const std::vector<Mutant>& mutants();

// CUDA (kvcache_cuda.cpp; only in a build with CUDA, KPROP_HAVE_CUDA):
// The paged engine (full prefill, one decode token per step) with the cache
// and the attention on device 0. Requires a device (check
// cuda_raw::device_count() first); throws std::runtime_error on CUDA errors.
Result cuda(const Case& c);

}  // namespace kprop::kvcache
