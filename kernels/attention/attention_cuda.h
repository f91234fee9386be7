// Flash attention FORWARD on a CUDA device (attention.fwd; contract in
// attention.h). Kernels in attention_cuda.cu and attention_cuda_wgmma.cu
// (plain C++17 for nvcc, no kprop, RapidCheck or yaml headers there):
//  * the spec-checked path, f32 or f64 per case: online softmax over Bq×Bk
//    tiles (the case's tile sizes), every mask kind, GQA, any Nq, Nk, D;
//    registered as implementation "cuda" of attention.fwd through the
//    Case -> FwdResult wrapper `cuda_forward` (attention_cuda.cpp, declared
//    in attention.h);
//  * the tensor-core path, f16 or bf16 inputs with f32 accumulation, D = 64
//    or 128, masks none / causal (bottom-right) / key_padding, GQA; two
//    kernels: FlashAttention-2 style mma.sync m16n8k16 (ldmatrix, cp.async
//    double buffering; sm_80 and up) and a Hopper one with wgmma (sm_90a
//    build). Device pointers for benchmarks, host arrays for tests and for
//    the spec's f16/bf16 cases (the `cuda` target routes them here through
//    `cuda_forward`; it declines other D and boolean masks, which this path
//    does not support).
// Everything here exists only when the family is built with CUDA
// (KPROP_HAVE_CUDA); registration turns "no device" into kprop::TargetUnavailable (skipped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace kprop::attention::cuda_raw {

// A problem this device cannot run at any tile size (its shared memory per
// block cannot hold 1×1 tiles at this head dimension): the registration
// declines the case (Unsupported), as it declines what the kernels do not take.
struct DeviceLimit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Number of CUDA devices; 0 when there is none or the runtime reports an
// error (no driver, insufficient driver). Cached after the first call.
int device_count();

// ---------------------------------------------------------------- f32 / f64
// The contract's masks (attention.h), as this forward and the backward
// (attention_bwd_cuda.h) take them: kind as attention.h's MaskKind numbers
// it, 0 none, 1 causal (query i sees key j iff j <= i + causal_offset),
// 2 key_padding (key_lengths[b]), 3 boolean (allowed[b][i][j]). Host
// pointers; null where the kind needs none.
struct Mask {
  int kind = 0;
  int causal_offset = 0;             // Nk - Nq for the contract
  const int* key_lengths = nullptr;  // key_padding: [batch]
  const uint8_t* allowed = nullptr;  // boolean: [batch, nq, nk]
};
struct HostProblem {
  int batch = 1, heads_q = 1, heads_kv = 1, nq = 1, nk = 1, dim = 1;
  int block_q = 1, block_k = 1;  // tile sizes (clamped to N; halved if shared memory is short)
  Mask mask;
};

// O [B,Hq,Nq,D] and LSE [B,Hq,Nq] on device 0 from host arrays, in T.
// Returns the shared-memory bytes one block used (its tile scratch: the
// analogue of the CPU kernels' Workspace; nothing Nq×Nk is allocated).
// Throws std::runtime_error without a device or on any CUDA error.
size_t forward(const HostProblem& p, float scale, const float* q, const float* k, const float* v, float* o,
               float* lse);
size_t forward(const HostProblem& p, double scale, const double* q, const double* k, const double* v,
               double* o, double* lse);

// ---------------------------------------------------------------- f16 / bf16
enum class Half { f16, bf16 };
enum class TcMask { none = 0, causal = 1, key_padding = 2 };
// mma_sync: the FlashAttention-2 kernel (sm_80 and up); wgmma: the Hopper
// kernel (sm_90a build, compute capability 9.0; Bq = 128, Bk = 64, tiling
// fields ignored); wgmma_ws: the warp-specialized Hopper kernel
// (FlashAttention-3's structure: a TMA producer warpgroup, two consumer
// warpgroups, the next S issued before this tile's softmax; Bq = 128,
// Bk = ws_block_k); automatic: wgmma_ws (Bk 128, ping-pong) where the
// sm_90a image runs, else mma_sync.
enum class TcKernel { automatic, mma_sync, wgmma, wgmma_ws };
// Does this build hold the sm_90a kernel and device 0 run it?
bool tc_wgmma_available();

// Device pointers; Q, O [B, Hq, Nq, D], K, V [B, Hkv, Nk, D] (16-bit values
// of `type`, 16-byte aligned), LSE [B, Hq, Nq] f32 (natural log; -inf for a
// fully masked row, whose O is 0). key_lengths: device [batch] for
// key_padding. scale 0: 1/sqrt(D).
struct TcParams {
  Half type = Half::f16;
  int batch = 1, heads_q = 1, heads_kv = 1, nq = 1, nk = 1, dim = 64;
  TcMask mask = TcMask::none;
  float scale = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const int* key_lengths = nullptr;
  // Tiling: `warps` (4 or 8) × `rows_per_warp` (16 or 32, the latter with 4
  // warps) query rows per block; 0, 0 picks (4 × 32 = 128 rows).
  int warps = 0, rows_per_warp = 0;
  TcKernel kernel = TcKernel::automatic;
  // wgmma only: registers budgeted for 1 or 2 blocks per SM (0: 2).
  int wgmma_min_blocks = 0;
  // wgmma_ws only: keys per tile (64 or 128; 0: 128) and whether the two
  // consumer warpgroups take turns issuing their GEMMs (ping-pong).
  int ws_block_k = 0;
  bool ws_pingpong = true;
  // Tests only: the running-max correction inverted (f16, D = 64), so the
  // test can show it catches a wrong rescale.
  bool planted_bug = false;
};
// Is the shape supported (D = 64 or 128, every dimension >= 1, Hq a
// multiple of Hkv)? The reason in `why` otherwise.
bool tc_supported(const TcParams& p, const char** why);
// Launches on `stream` (a cudaStream_t, nullptr: the default stream); no
// synchronization. Throws std::runtime_error on an unsupported shape or a
// launch error.
void tc_forward_async(const TcParams& p, void* stream);

// Host convenience for tests: inputs as floats that must already be exactly
// representable in `type` (round with round_half), outputs as floats (O
// rounded to `type` by the kernel). key_lengths on the host. Synchronous.
void tc_forward_host(Half type, int batch, int heads_q, int heads_kv, int nq, int nk, int dim, TcMask mask,
                     const int* key_lengths, float scale, const float* q, const float* k, const float* v,
                     float* o, float* lse, int warps = 0, int rows_per_warp = 0, bool planted_bug = false,
                     TcKernel kernel = TcKernel::automatic, int ws_block_k = 0, bool ws_pingpong = true);
// x rounded to nearest-even in `type`, as a float.
float round_half(Half type, float x);

}  // namespace kprop::attention::cuda_raw
