/* kprop's C ABI: test a kernel built elsewhere without recompiling kprop.
 *
 * A plugin is a shared library that exports
 *   - kprop_abi_version(), returning KPROP_ABI_VERSION (write KPROP_PLUGIN();),
 *   - one entry point per kernel op it implements, e.g. kprop_attention_fwd,
 *     with the signature   int NAME(const ARGS* args, char* error, size_t error_size);
 * and is run with   prop_runner --spec specs/attention_fwd.yaml --target plugin:./libmine.so
 * The family comes from the spec. kprop allocates every tensor, inputs and
 * outputs alike; the plugin writes its outputs into the views it is given,
 * every element of them: outputs arrive poisoned (0xFF bytes in floats, 0x5A
 * in integers), and a float element still all 0xFF after the call fails it
 * ("was never written"), even where NaN is the expected value (not where a
 * field's comment allows any value, e.g. beam's empty slots). Inputs are
 * read-only, though their `data` is not const: kprop compares each with what
 * it sent after the call, and a kernel that wrote into one fails it. Guard
 * bytes before and after every tensor fail a call that writes outside it.
 * Return KPROP_OK, KPROP_ERROR (message in `error`: the case is saved and the
 * run exits 3) or KPROP_UNSUPPORTED (the case is declined: counted apart,
 * never as a pass; a run whose every case is declined is reported skipped).
 *
 * The same args reach a Python or any other worker through the framed
 * protocol of docs/EXTERNAL.md (`--target exec:COMMAND`): tensors and
 * attributes carry the names of the struct fields below.
 *
 * Compatibility: KPROP_ABI_VERSION changes whenever a struct below changes;
 * kprop refuses a plugin built against another version (a clear error, exit 2).
 */
#ifndef KPROP_ABI_H
#define KPROP_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KPROP_ABI_VERSION 1
#define KPROP_MAX_DIMS 6

/* Return codes of an entry point. */
enum { KPROP_OK = 0, KPROP_ERROR = 1, KPROP_UNSUPPORTED = 2 };

/* Element types; values are stable across ABI versions. */
typedef enum kprop_dtype {
  KPROP_F32 = 1,
  KPROP_F64 = 2,
  KPROP_F16 = 3,
  KPROP_BF16 = 4,
  KPROP_I8 = 5,
  KPROP_U8 = 6,
  KPROP_I32 = 7,
  KPROP_I64 = 8
} kprop_dtype;

/* Where `data` lives. */
typedef enum kprop_device { KPROP_HOST = 0, KPROP_CUDA = 1 } kprop_device;

/* Optional export: where an op wants its tensors.
 *   KPROP_EXPORT int32_t kprop_op_device(const char* op) {
 *     return strcmp(op, "attention.fwd") == 0 ? KPROP_CUDA : KPROP_HOST;
 *   }
 * For an op answered with KPROP_CUDA, kprop copies every input to CUDA device
 * memory (device 0), poisons the outputs on the device (0xFF bytes for
 * floats, 0x5A for integers, as on the host), calls
 * the entry point with tensor.device == KPROP_CUDA and device pointers in
 * tensor.data, synchronizes, and copies the outputs back (and the inputs, to
 * check that they are unchanged). The args struct and
 * `error` stay in host memory. kprop synchronizes the device after the call,
 * so kernels still running on any stream are waited for. A CUDA error (a fault in
 * a kernel, out of memory) fails the case and restarts the plugin host; no
 * CUDA device makes the target unavailable (the run is reported skipped,
 * never passed; docs/EXTERNAL.md). Without this
 * export, or for KPROP_HOST, tensors are in host memory. */
typedef int32_t (*kprop_op_device_fn)(const char* op);

/* A strided view of a tensor. Strides count elements, not bytes. An optional
 * tensor the case does not have is passed with data == NULL and ndim == 0. */
typedef struct kprop_tensor {
  void* data;
  int32_t dtype;  /* kprop_dtype */
  int32_t device; /* kprop_device */
  int32_t ndim;
  int32_t reserved;
  int64_t shape[KPROP_MAX_DIMS];
  int64_t strides[KPROP_MAX_DIMS];
} kprop_tensor;

/* Element size in bytes (0 for an unknown dtype). */
static inline size_t kprop_dtype_size(int32_t dtype) {
  switch (dtype) {
    case KPROP_F64:
    case KPROP_I64:
      return 8;
    case KPROP_F32:
    case KPROP_I32:
      return 4;
    case KPROP_F16:
    case KPROP_BF16:
      return 2;
    case KPROP_I8:
    case KPROP_U8:
      return 1;
    default:
      return 0;
  }
}

/* Callable from device code too when compiled by nvcc (a kernel gets the
 * tensors by value, shape and strides inside them). */
#ifdef __CUDACC__
#define KPROP_HOST_DEVICE __host__ __device__
#else
#define KPROP_HOST_DEVICE
#endif

/* Offset in elements of index (i0, i1, ...) in t: use it instead of assuming
 * a contiguous layout. */
static inline KPROP_HOST_DEVICE int64_t kprop_offset(const kprop_tensor* t, const int64_t* index) {
  int64_t off = 0;
  for (int32_t d = 0; d < t->ndim; ++d) off += index[d] * t->strides[d];
  return off;
}

#ifdef __cplusplus
#define KPROP_EXTERN_C extern "C"
#else
#define KPROP_EXTERN_C
#endif
#define KPROP_EXPORT KPROP_EXTERN_C __attribute__((visibility("default")))

/* Put this once in a plugin: it exports the version kprop checks. */
#define KPROP_PLUGIN()                            \
  KPROP_EXPORT uint32_t kprop_abi_version(void) { \
    return KPROP_ABI_VERSION;                     \
  }

#ifdef __cplusplus
}
#endif

/* One header per family: the args struct of each op. */
#include "kprop/abi/attention.h"
#include "kprop/abi/beam.h"
#include "kprop/abi/dflash.h"
#include "kprop/abi/kvcache.h"
#include "kprop/abi/layernorm.h"
#include "kprop/abi/op.h"
#include "kprop/abi/softmax_topk.h"
#include "kprop/abi/ternary.h"

#endif /* KPROP_ABI_H */
