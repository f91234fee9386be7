// Flash attention forward and backward on the CPU (docs/FAMILIES.md,
// attention.fwd and attention.bwd).
//
// Contract. Q [B, Hq, Nq, D], K and V [B, Hkv, Nk, D], dO [B, Hq, Nq, D],
// row-major in that order. GQA: Hq = g·Hkv and query head h reads kv head
// h / g. S = scale·Q·Kᵀ with scale = 1/sqrt(D) unless the case gives one.
// Masks (one kind per case):
//   none         every key is visible;
//   causal       aligned bottom-right: query i sees key j iff j <= i + Nk - Nq
//                (the FlashAttention 2.1+ convention), so Nq > Nk leaves the
//                first Nq - Nk rows fully masked;
//   key_padding  batch b sees keys j < key_lengths[b] (0 allowed);
//   boolean      allowed[b][i][j] (shared by every head; rows may be empty).
// Outputs O [B, Hq, Nq, D] and LSE [B, Hq, Nq] (natural log of the softmax
// denominator, scores included). A fully masked row gives O = 0, LSE = -inf
// and zero gradients — never NaN. The backward takes dO and returns dQ, dK,
// dV (dK, dV summed over the query heads that share a kv head).
//
// Every scratch buffer of the tiled kernels comes from a Workspace (see
// workspace.h): the `workspace_bounded` invariant reads its high-water mark.
//
// Precision (as FlashAttention 2 does it on tensor cores). f32 and f64 cases
// compute in their own precision. f16 and bf16 cases store Q, K, V, dO, O,
// dQ, dK, dV in the half type and compute in f32: scores, the online max and
// row sum, the O accumulator, dP and the dK/dV/dQ accumulators are f32; P is
// rounded to the half type before P·V and Pᵀ·dO, dS before dS·K and dSᵀ·Q
// (the operands a tensor core takes), outputs are rounded when stored; LSE
// and D are kept in f32 (softmax_lse and softmax_d are float in FA2). The
// scale is an f32 kernel argument. Rounding is to nearest, ties to even.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/workspace.h"
#include "kprop/float_type.h"
#include "kprop/mutant.h"

namespace kprop::attention {

enum class MaskKind { none, causal, key_padding, boolean };
// The case's dtype: f32, f64, f16, bf16 (kprop/float_type.h: names, rounding, constants).
using DType = FloatType;
const char* mask_name(MaskKind kind);

struct Shape {
  int batch = 1, heads_q = 1, heads_kv = 1, nq = 1, nk = 1, dim = 1;
  int group() const { return heads_q / heads_kv; }
  size_t q_size() const { return size_t(batch) * heads_q * nq * dim; }
  size_t kv_size() const { return size_t(batch) * heads_kv * nk * dim; }
  size_t rows() const { return size_t(batch) * heads_q * nq; }  // LSE / D entries
  bool operator==(const Shape&) const = default;
};

// One case of either family. Tensors are stored as doubles that are exactly
// representable in `dtype` (the generator and the YAML codec round them), so
// the reference sees exactly the target's inputs.
struct Case {
  Shape shape;
  int block_q = 1, block_k = 1;  // tile sizes Bq, Bk (may exceed N or not divide it)
  DType dtype = DType::f64;
  double scale = 0;  // 0: 1/sqrt(D)
  MaskKind mask = MaskKind::none;
  std::vector<int> key_lengths;  // key_padding: one per batch, in [0, Nk]
  std::vector<uint8_t> allowed;  // boolean: [B, Nq, Nk], 1 = visible
  std::vector<double> q, k, v;
  std::vector<double> d_out;  // backward only (empty for the forward family)
  bool operator==(const Case&) const = default;
};

// The scale the kernels use, rounded to the case's dtype.
double effective_scale(const Case& c);
// Does query i of batch b see key j? (the contract above, for the reference)
bool visible(const Case& c, int b, int i, int j);
bool row_fully_masked(const Case& c, int b, int i);
// Why the case breaks the contract, or "" if valid. `backward` requires dO.
std::string validate(const Case& c, bool backward);
// The precision LSE and D are kept in: f32 for half cases, else the dtype.
DType stats_dtype(DType dtype);

struct FwdResult {
  std::vector<double> o, lse;
  size_t workspace_peak = 0;  // bytes, high-water mark of the kernel's Workspace
  // The kernel's scratch is tiles of its own fixed size whatever the case's
  // Bq, Bk, Nq and Nk (the CUDA tensor-core path): workspace_bounded is n/a.
  bool fixed_tiles = false;
};

struct BwdResult {
  std::vector<double> o, lse;  // the forward the gradients were taken from
  std::vector<double> d;       // per row: the rowsum(P ⊙ dP) the kernel used (D)
  std::vector<double> dq, dk, dv;
  size_t workspace_peak = 0;
  bool fixed_tiles = false;  // as FwdResult's
};

// ---------------------------------------------------------------- typed kernels
// What the typed kernels see: raw tensors of one precision. `causal_offset`
// is Nk - Nq for the contract (mutants move it).
struct MaskView {
  MaskKind kind = MaskKind::none;
  int causal_offset = 0;
  const int* key_lengths = nullptr;
  const uint8_t* allowed = nullptr;
};

// Where a kernel computing in T stores half-precision tensors (the Precision
// note above): `same` stores in T; the others round P and dS tiles and the
// outputs to f16 / bf16, to nearest even.
enum class Storage { same, f16, bf16 };

template <typename T>
struct Inputs {
  Shape shape;
  MaskView mask;
  Storage store = Storage::same;
  T scale = 1;
  int block_q = 1, block_k = 1;
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* d_out = nullptr;
};

// Outputs of the backward kernels (caller-allocated, sizes from the shape).
template <typename T>
struct Grads {
  T* dq;
  T* dk;
  T* dv;
  T* d;  // per row: D as the kernel used it
};

// Deliberate bugs, compiled out of the correct instantiations (the mutants of
// docs/FAMILIES.md, attention.fwd and attention.bwd).
enum class FwdBug {
  none,
  rescale_inverted,    // running-sum correction exp(m_new - m_old)
  nan_masked_tile,     // no guard for a tile whose row max is -inf
  no_empty_row_guard,  // O = acc / l with l = 0
  drop_partial_tile,   // last uneven KV tile skipped
  gqa_head_map,        // kv head h % Hkv
  lse_missing_max,     // LSE = log l
  additive_mask,       // masked scores get -1e4 added (every key tile visited), not -inf
  // Precision bugs (differ from the correct kernel on f16/bf16 cases only):
  pv_in_storage,      // the P·V accumulator held in the storage type
  rowsum_in_storage,  // the running row sum l held in the storage type
  lse_in_storage,     // LSE stored in the storage type instead of f32
  o_store_truncated,  // O converted to the storage type by truncation (toward zero)
  // Past the default domain's Nk <= 40 only (specs/attention_fwd.yaml, profile gpu):
  keys_capped_64,  // keys past the 64th never read (a fixed 64-key buffer)
};
enum class BwdBug {
  none,
  dsoftmax_wrong_axis,     // D summed over queries, per key
  dsoftmax_missing_p,      // dS = dP - D
  dsoftmax_divide,         // dS = P ⊙ dP / D
  d_without_do,            // D = rowsum(O)
  dk_missing_scale,        // dK = dSᵀQ
  masked_row_nan,          // P = exp(S - LSE) with LSE = -inf
  stale_tile_max,          // P from the running max at the tile, not the final LSE
  causal_skip_off_by_one,  // skips the KV tile whose only visible key is the corner
  scale_in_storage,        // f16/bf16: the backward's softmax scale rounded to the storage type
  d_in_storage,            // f16/bf16: D rounded to the storage type (it stays in f32)
  grads_store_truncated,   // f16/bf16: dQ, dK, dV converted to the storage type by truncation
  dq_store_truncated,      // f16/bf16: dQ alone converted by truncation (its own conversion pass)
  // Past the old Nq cap of 4096 only (specs/attention_bwd.yaml, profile large):
  d_rows_4096,  // D staged in a 4096-row buffer: row i's D in slot i mod 4096
};
enum class BwdMode { single_pass_d, two_pass };

// Online-softmax forward; o [B,Hq,Nq,D], lse [B,Hq,Nq].
template <typename T, FwdBug bug = FwdBug::none>
void tiled_forward(const Inputs<T>& in, T* o, T* lse, Workspace& ws);
// Backward from the forward's O and LSE.
template <typename T, BwdMode mode = BwdMode::single_pass_d, BwdBug bug = BwdBug::none>
void tiled_backward(const Inputs<T>& in, const T* o, const T* lse, Grads<T> out, Workspace& ws);

// Plain materialized attention in T: scores, softmax and products as whole
// Nq×Nk matrices (from `ws`). The same-precision baseline of the tolerance
// policy and the benchmark's comparison point.
template <typename T>
void materialized_forward(const Inputs<T>& in, T* o, T* lse, Workspace& ws);
template <typename T>
void materialized_backward(const Inputs<T>& in, Grads<T> out, Workspace& ws);

// ---------------------------------------------------------------- implementations
// fp64, materialized, written for clarity; D reported as rowsum(P ⊙ dP).
FwdResult reference_forward(const Case& c);
BwdResult reference_backward(const Case& c);
// Forward: `tiled` (Bq, Bk from the case). Backward: the tiled forward, then
// `tiled_d` (single pass, D = rowsum(dO ⊙ O)) or `tiled_two_pass`.
FwdResult tiled(const Case& c);
BwdResult tiled_d(const Case& c);
BwdResult tiled_two_pass(const Case& c);
// The naive same-precision computation (materialized in the case's dtype).
FwdResult naive_forward(const Case& c);
BwdResult naive_backward(const Case& c);

// The mutants (mutants.cpp): the tiled kernels with one FwdBug / BwdBug
// switched on or the causal offset moved.
template <typename Result>
using Mutant = kprop::Mutant<Case, Result>;
const std::vector<Mutant<FwdResult>>& forward_mutants();
const std::vector<Mutant<BwdResult>>& backward_mutants();

// CUDA (attention_cuda.cpp; only in a build with CUDA, KPROP_HAVE_CUDA):
// The case on device 0 in its dtype (f32 or f64) through the spec-checked
// kernel, widened back to double like the CPU implementations. Requires a
// device (check cuda_raw::device_count() first).
FwdResult cuda_forward(const Case& c);

// CUDA (attention_bwd_cuda.cpp; only in a build with CUDA, KPROP_HAVE_CUDA):
// The case on device 0 in its dtype (f32 or f64), widened back to double like
// the CPU implementations; workspace_peak is the per-block shared-memory
// scratch. Requires a device (check cuda_bwd_raw::device_count() first).
BwdResult cuda_backward(const Case& c);

}  // namespace kprop::attention
