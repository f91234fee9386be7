// Plugins that must be refused with a clear error (exit 2):
//   KPROP_TEST_BAD_VERSION  exports another ABI version;
//   KPROP_TEST_NO_ENTRY     exports the version but no kprop_attention_fwd
//                           (it has one without extern "C": C++-mangled);
//   KPROP_TEST_DATA_VERSION exports kprop_abi_version as a variable, not a
//                           function (calling it killed the plugin host).
// One that prints while it loads and is probed (KPROP_TEST_CHATTY: a
// constructor and kprop_op_device print to stdout): the report on stdout
// stays clean (--format json parses).
// Ones that fail while they load, which must not take the runner down (it
// loads them in the plugin host, never in its own process):
//   KPROP_TEST_CTOR_CRASH   a constructor that aborts: exit 2, the death said;
//   KPROP_TEST_CTOR_HANG    a constructor that never returns: SIGTERM stops
//                           the run at once (exit 130), the host killed.
//   KPROP_TEST_TOUCHES_ITSELF  a kernel that touches its own .so, as a rebuild
//                           would, then aborts: the restarted host refuses
//                           the changed file (exit 2), no finding recorded.
// And one whose error must be reported as its error (exit 3, the message kept):
//   KPROP_TEST_LATIN1_ERROR fails every call with a message that is not UTF-8
//                           (Latin-1 "café"), which killed the plugin host.
// A dflash verifier that writes `accepted` up to its last accepted node and
// never its -1 tail (KPROP_TEST_DFLASH_NO_TAIL; KPROP_TEST_DFLASH_CORRECT
// writes it): the tail a kernel never writes holds the poison, not the -1
// the contract asks for, and the case fails (it passed while integer
// outputs were poisoned with 0xFF bytes, -1 in i32).
// A copy kernel for tests/external/op_copy.yaml (y = x, NaN included)
// that breaks one rule of the harness (KPROP_TEST_COPY_CORRECT breaks none):
//   KPROP_TEST_COPY_SKIPS_NAN  never writes y where x is NaN: the poison
//                              there is a NaN too, and the case passed;
//                              now the call fails ("was never written").
//   KPROP_TEST_COPY_WRITES_BEFORE  copies, then writes the 4 bytes just
//                              before y's start: they were heap memory, and
//                              the case passed; now the call fails ("wrote
//                              before the start of output y").
//   KPROP_TEST_COPY_WRITES_INPUT  copies, then zeroes x (inputs are
//                              read-only): the case passed; now the call
//                              fails ("the kernel wrote into input x").
//   KPROP_TEST_COPY_READS_CONTIGUOUS  reads x as if contiguous (r * D + c,
//                              not through its strides), writes y through
//                              its strides: correct on contiguous tensors;
//                              padded, it copies another row's values or
//                              x's padding, which is not the outputs'
//                              poison, so the invariants fail it (it was
//                              read as an output "never written").
//   KPROP_TEST_COPY_BAD_STATUS  copies, then returns 7, no status of the ABI:
//                              the call fails, saying what the entry point
//                              may return.
#include <dlfcn.h>
#include <fcntl.h>
#include <kprop/abi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef KPROP_TEST_BAD_VERSION
KPROP_EXPORT uint32_t kprop_abi_version(void) {
  return KPROP_ABI_VERSION + 41;
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_DATA_VERSION
extern "C" {
__attribute__((visibility("default"))) uint32_t kprop_abi_version = KPROP_ABI_VERSION;  // a variable
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_LATIN1_ERROR
KPROP_PLUGIN();
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char* error, size_t size) {
  std::strncpy(error, "caf\xe9 failed", size);
  return KPROP_ERROR;
}
#endif

#ifdef KPROP_TEST_NO_ENTRY
KPROP_PLUGIN();
KPROP_EXPORT int kprop_attention_fwd_v2(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
// The entry point's name without extern "C" (KPROP_EXPORT forgotten): the
// file has it only C++-mangled, which the error points out.
__attribute__((visibility("default"))) int kprop_attention_fwd(const kprop_attention_fwd_args*, char*,
                                                               size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_CHATTY
KPROP_PLUGIN();
__attribute__((constructor)) static void chatty_loaded() {
  std::printf("chatty plugin loaded\n");
}
KPROP_EXPORT int32_t kprop_op_device(const char* op) {
  std::printf("chatty device query for %s\n", op);
  return KPROP_HOST;
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_UNSUPPORTED;
}
#endif

#if defined(KPROP_TEST_CTOR_CRASH) || defined(KPROP_TEST_CTOR_HANG)
KPROP_PLUGIN();
__attribute__((constructor)) static void fail_on_load() {
#ifdef KPROP_TEST_CTOR_CRASH
  std::fprintf(stderr, "ctor_crash plugin: aborting while it loads\n");
  std::abort();
#else
  for (;;) pause();
#endif
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_TOUCHES_ITSELF
KPROP_PLUGIN();
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&kprop_attention_fwd), &self) && self.dli_fname) {
    const timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};  // mtime: 2033
    utimensat(AT_FDCWD, self.dli_fname, later, 0);
  }
  std::abort();
}
#endif

#if defined(KPROP_TEST_DFLASH_NO_TAIL) || defined(KPROP_TEST_DFLASH_CORRECT)
KPROP_PLUGIN();
namespace {
int32_t& at(const kprop_tensor& t, int64_t i) {
  return static_cast<int32_t*>(t.data)[i * t.strides[0]];
}
const int32_t& in(const kprop_tensor& t, int64_t i) {
  return static_cast<const int32_t*>(t.data)[i * t.strides[0]];
}
// argmax of logits row r, the lowest index on exact ties.
int32_t argmax(const kprop_tensor& logits, int64_t r) {
  const auto* x = static_cast<const double*>(logits.data);
  int32_t best = 0;
  for (int64_t v = 1; v < logits.shape[1]; ++v)
    if (x[r * logits.strides[0] + v * logits.strides[1]] >
        x[r * logits.strides[0] + best * logits.strides[1]])
      best = static_cast<int32_t>(v);
  return best;
}
}  // namespace
KPROP_EXPORT int kprop_dflash_tree_inputs(const kprop_dflash_tree_inputs_args* a, char*, size_t) {
  const int64_t n = a->parents.ndim ? a->parents.shape[0] : 0, context = a->context_length;
  for (int64_t i = 0; i < n; ++i) {
    int32_t depth = 1;
    for (int32_t p = in(a->parents, i); p >= 0; p = in(a->parents, p)) ++depth;
    at(a->position_ids, i) = static_cast<int32_t>(context + depth - 1);
    auto* mask = static_cast<uint8_t*>(a->mask.data);
    for (int64_t j = 0; j < context + n; ++j) {
      bool sees = j < context;
      for (int64_t x = i; !sees && x >= 0 && j >= context; x = in(a->parents, x)) sees = x == j - context;
      mask[i * a->mask.strides[0] + j * a->mask.strides[1]] = sees;
    }
  }
  return KPROP_OK;
}
KPROP_EXPORT int kprop_dflash_verify(const kprop_dflash_verify_args* a, char*, size_t) {
  const int64_t n = a->tokens.ndim ? a->tokens.shape[0] : 0;
  int64_t k = 0;
  int32_t last = -1;
  for (bool found = true; found;) {
    const int32_t prediction = argmax(a->logits, last + 1);
    found = false;
    for (int64_t j = 0; j < n && !found; ++j)
      if (in(a->parents, j) == last && in(a->tokens, j) == prediction) {
        at(a->accepted, k++) = static_cast<int32_t>(j);
        last = static_cast<int32_t>(j), found = true;
      }
  }
#ifdef KPROP_TEST_DFLASH_CORRECT
  for (; k < n; ++k) at(a->accepted, k) = -1;
#endif
  at(a->bonus, 0) = argmax(a->logits, last + 1);
  return KPROP_OK;
}
#endif

#if defined(KPROP_TEST_COPY_CORRECT) || defined(KPROP_TEST_COPY_SKIPS_NAN) ||          \
    defined(KPROP_TEST_COPY_WRITES_BEFORE) || defined(KPROP_TEST_COPY_WRITES_INPUT) || \
    defined(KPROP_TEST_COPY_READS_CONTIGUOUS) || defined(KPROP_TEST_COPY_BAD_STATUS)
KPROP_PLUGIN();
namespace {
// Whether the `size`-byte element `bits` is a NaN of its float dtype.
bool is_nan(uint64_t bits, size_t size) {
  switch (size) {
    case 8:
      return (bits & 0x7FF0000000000000u) == 0x7FF0000000000000u && (bits & 0x000FFFFFFFFFFFFFu);
    case 4:
      return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu);
    default:  // f16 (5 exponent bits) or bf16 (8): the dtype tells
      return false;
  }
}
bool is_nan16(uint16_t bits, int32_t dtype) {
  return dtype == KPROP_F16 ? (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu)
                            : (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu);
}
}  // namespace
KPROP_EXPORT int kprop_op_copy(const kprop_op_args* a, char*, size_t) {
  const kprop_tensor* x = kprop_op_input(a, "x");
  const kprop_tensor* y = kprop_op_output(a, "y");
  const size_t size = kprop_dtype_size(x->dtype);
  for (int64_t r = 0; r < x->shape[0]; ++r)
    for (int64_t c = 0; c < x->shape[1]; ++c) {
      const int64_t index[2] = {r, c};
#ifdef KPROP_TEST_COPY_READS_CONTIGUOUS
      const auto* from = static_cast<const uint8_t*>(x->data) + (r * x->shape[1] + c) * int64_t(size);
#else
      const auto* from = static_cast<const uint8_t*>(x->data) + kprop_offset(x, index) * int64_t(size);
#endif
      auto* to = static_cast<uint8_t*>(y->data) + kprop_offset(y, index) * int64_t(size);
      uint64_t bits = 0;
      std::memcpy(&bits, from, size);
      const bool nan = size == 2 ? is_nan16(uint16_t(bits), x->dtype) : is_nan(bits, size);
#ifdef KPROP_TEST_COPY_SKIPS_NAN
      if (nan) continue;
#else
      (void)nan;
#endif
      std::memcpy(to, from, size);
    }
#ifdef KPROP_TEST_COPY_WRITES_BEFORE
  std::memset(static_cast<uint8_t*>(y->data) - 4, 0x42, 4);
#endif
#ifdef KPROP_TEST_COPY_WRITES_INPUT
  for (int64_t r = 0; r < x->shape[0]; ++r)
    for (int64_t c = 0; c < x->shape[1]; ++c) {
      const int64_t index[2] = {r, c};
      std::memset(static_cast<uint8_t*>(x->data) + kprop_offset(x, index) * int64_t(size), 0, size);
    }
#endif
#ifdef KPROP_TEST_COPY_BAD_STATUS
  return 7;
#else
  return KPROP_OK;
#endif
}
#endif
