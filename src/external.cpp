#include "kprop/external.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <link.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "kprop/enum_names.h"
#include "kprop/errors.h"
#include "kprop/float_type.h"
#include "kprop/half.h"
#include "kprop/interrupt.h"
#include "kprop/process.h"
#include "kprop/target_call.h"

namespace kprop::external {

// ---------------------------------------------------------------- tensors
namespace {
bool is_real(int32_t dtype) {
  return dtype == KPROP_F32 || dtype == KPROP_F64 || dtype == KPROP_F16 || dtype == KPROP_BF16;
}
}  // namespace

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case KPROP_F32:
      return "f32";
    case KPROP_F64:
      return "f64";
    case KPROP_F16:
      return "f16";
    case KPROP_BF16:
      return "bf16";
    case KPROP_I8:
      return "i8";
    case KPROP_U8:
      return "u8";
    case KPROP_I32:
      return "i32";
    case KPROP_I64:
      return "i64";
    default:
      return "?";
  }
}

int32_t abi_dtype(FloatType t) {
  static constexpr EnumValue<FloatType, int32_t> kCodes[] = {{FloatType::f32, KPROP_F32},
                                                             {FloatType::f64, KPROP_F64},
                                                             {FloatType::f16, KPROP_F16},
                                                             {FloatType::bf16, KPROP_BF16}};
  static_assert(std::size(kCodes) == size_t(FloatType::bf16) + 1 && in_enum_order(kCodes));
  return kCodes[static_cast<size_t>(t)].value;
}

int32_t dtype_from_name(const std::string& name) {
  for (int32_t d = KPROP_F32; d <= KPROP_I64; ++d)
    if (name == dtype_name(d)) return d;
  throw std::runtime_error(fmt::format("unknown dtype '{}'", name));
}

std::optional<size_t> checked_nbytes(const std::vector<int64_t>& shape, int32_t dtype) {
  size_t n = kprop_dtype_size(dtype);
  if (n == 0) return std::nullopt;
  for (int64_t s : shape) {
    if (s < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) return std::nullopt;
  }
  // Element counts are int64_t in the C views.
  if (n / kprop_dtype_size(dtype) > static_cast<size_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return n;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n))
      throw std::length_error(fmt::format("tensor {} has shape [{}]: {}", name, fmt::join(shape, ","),
                                          s < 0 ? "a negative dimension" : "too many elements"));
  return n;
}

size_t Tensor::nbytes() const {
  numel();  // throws, naming the shape
  const auto n = checked_nbytes(shape, dtype);
  if (!n) throw std::length_error(fmt::format("tensor {}: its size in bytes overflows", describe()));
  return *n;
}

namespace {
template <typename T>
void store(std::vector<uint8_t>& bytes, size_t i, T value) {
  std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
}
template <typename T>
T load(const std::vector<uint8_t>& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}
[[noreturn]] void no_conversion(int32_t dtype) {
  throw std::logic_error(fmt::format("kprop: no host conversion for dtype {}", dtype_name(dtype)));
}
}  // namespace

Tensor Tensor::declare(std::string name, int32_t dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

namespace {
// Stores `values` converted to the tensor's dtype; `convert(bytes, i, value)`
// knows the dtypes of one value kind (floats or integers).
template <typename Value, typename Convert>
Tensor filled(std::string name, int32_t dtype, std::vector<int64_t> shape, std::span<const Value> values,
              Convert convert) {
  Tensor t = Tensor::declare(std::move(name), dtype, std::move(shape));
  if (static_cast<size_t>(t.numel()) != values.size())
    throw std::logic_error(
        fmt::format("kprop: tensor {} has {} values for {} elements", t.name, values.size(), t.numel()));
  t.bytes.resize(t.nbytes());
  for (size_t i = 0; i < values.size(); ++i) convert(t.bytes, i, values[i]);
  return t;
}
}  // namespace

Tensor Tensor::of(std::string name, int32_t dtype, std::vector<int64_t> shape,
                  std::span<const double> values) {
  return filled(std::move(name), dtype, std::move(shape), values,
                [dtype](std::vector<uint8_t>& bytes, size_t i, double v) {
                  if (dtype == KPROP_F32) return store(bytes, i, static_cast<float>(v));
                  if (dtype == KPROP_F64) return store(bytes, i, v);
                  // Halves round to nearest even straight from the double (kprop/half.h).
                  if (dtype == KPROP_F16) return store(bytes, i, half::f16_from_double(v));
                  if (dtype == KPROP_BF16) return store(bytes, i, half::bf16_from_double(v));
                  no_conversion(dtype);
                });
}

Tensor Tensor::of_ints(std::string name, int32_t dtype, std::vector<int64_t> shape,
                       std::span<const int64_t> values) {
  return filled(std::move(name), dtype, std::move(shape), values,
                [dtype](std::vector<uint8_t>& bytes, size_t i, int64_t v) {
                  if (dtype == KPROP_I8) return store(bytes, i, static_cast<int8_t>(v));
                  if (dtype == KPROP_U8) return store(bytes, i, static_cast<uint8_t>(v));
                  if (dtype == KPROP_I32) return store(bytes, i, static_cast<int32_t>(v));
                  if (dtype == KPROP_I64) return store(bytes, i, v);
                  no_conversion(dtype);
                });
}

std::vector<double> Tensor::to_doubles() const {
  if (!is_real(dtype)) {  // integers: converted once, not per element
    const std::vector<int64_t> ints = to_ints();
    return std::vector<double>(ints.begin(), ints.end());
  }
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {  // all exact
      case KPROP_F32:
        out[i] = load<float>(bytes, i);
        break;
      case KPROP_F16:
        out[i] = half::f16_to_double(load<uint16_t>(bytes, i));
        break;
      case KPROP_BF16:
        out[i] = half::bf16_to_double(load<uint16_t>(bytes, i));
        break;
      default:
        out[i] = load<double>(bytes, i);
    }
  }
  return out;
}

std::vector<int64_t> Tensor::to_ints() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case KPROP_I8:
        out[i] = load<int8_t>(bytes, i);
        break;
      case KPROP_U8:
        out[i] = load<uint8_t>(bytes, i);
        break;
      case KPROP_I32:
        out[i] = load<int32_t>(bytes, i);
        break;
      case KPROP_I64:
        out[i] = load<int64_t>(bytes, i);
        break;
      default:
        no_conversion(dtype);
    }
  }
  return out;
}

std::vector<int64_t> Tensor::to_flags(const std::string& op) const {
  std::vector<int64_t> out = to_ints();
  const size_t size = kprop_dtype_size(dtype);
  const auto poisoned = [&](size_t i) {
    return std::all_of(bytes.begin() + long(i * size), bytes.begin() + long((i + 1) * size),
                       [&](uint8_t b) { return b == poison_byte(dtype); });
  };
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != 0 && out[i] != 1)
      throw TargetFailure(
          "error",
          fmt::format("{}: output {} holds {} at element {}: a boolean output is 0 or 1{}", op, name, out[i],
                      i, poisoned(i) ? " (the poison: an entry the kernel did not write)" : ""));
  return out;
}

kprop_tensor Tensor::view() const {
  kprop_tensor v{};
  if (shape.size() > KPROP_MAX_DIMS)
    throw std::logic_error(fmt::format("kprop: tensor {} has more than {} dims", name, KPROP_MAX_DIMS));
  v.data = const_cast<uint8_t*>(bytes.data());
  v.dtype = dtype;
  v.device = KPROP_HOST;
  v.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[d] = shape[static_cast<size_t>(d)];
    v.strides[d] = stride;
    stride *= shape[static_cast<size_t>(d)];
  }
  return v;
}

std::string Tensor::describe() const {
  return fmt::format("{} {}[{}]", name, dtype_name(dtype), fmt::join(shape, ","));
}

const Tensor* Message::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const Tensor& Message::tensor(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  throw TargetFailure("error", fmt::format("{}: no tensor '{}'", op, name));
}

// Guard bytes after each output buffer of an in-memory call (plugin host,
// in process, device): a kernel that writes past the end of an output (an
// off-by-one row, a wrong stride) changes them, and the call is an error,
// never a pass. Without them the write landed in the heap unseen: the run
// passed, or a later, unrelated case crashed and was stored as the finding.
constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0xA5;

uint8_t poison_byte(int32_t dtype) {
  switch (dtype) {
    case KPROP_F32:
    case KPROP_F64:
    case KPROP_F16:
    case KPROP_BF16:
      return 0xFF;
    default:
      return 0x5A;
  }
}

// Outputs poisoned (poison_byte), each followed by its guard bytes;
// check_guards() removes them after the call.
Message allocate_reply(const Message& request) {
  Message reply;
  reply.op = request.op;
  for (const auto& declared : request.outputs) {
    Tensor t = declared;
    t.bytes.assign(t.nbytes() + kGuardBytes, poison_byte(t.dtype));
    std::fill(t.bytes.end() - kGuardBytes, t.bytes.end(), kGuardByte);
    reply.tensors.push_back(std::move(t));
  }
  return reply;
}

namespace {
// The first element of a float tensor still holding the poison (all of its
// bytes 0xFF: the all-ones NaN of its dtype), or -1. That bit pattern is
// what no kernel writes: kprop's own NaN inputs are 0x7FF8... / 0xFFF8...
// (f64; f32, f16, bf16 the same quiet NaNs), never all ones, so a kernel
// that copies an input's NaN through, or computes a NaN (0/0 gives the
// default NaN, 0xFFF8... on x86), writes another pattern.
template <typename Bits>
int64_t first_all_ones(const std::vector<uint8_t>& bytes, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    Bits v;
    std::memcpy(&v, bytes.data() + i * sizeof v, sizeof v);
    if (v == static_cast<Bits>(~Bits{0})) return int64_t(i);
  }
  return -1;
}
int64_t first_unwritten(const Tensor& t) {
  const auto count = static_cast<size_t>(t.numel());
  switch (t.dtype) {
    case KPROP_F64:
      return first_all_ones<uint64_t>(t.bytes, count);
    case KPROP_F32:
      return first_all_ones<uint32_t>(t.bytes, count);
    case KPROP_F16:
    case KPROP_BF16:
      return first_all_ones<uint16_t>(t.bytes, count);
    default:  // integers: 0x5A bytes are a value like any other
      return -1;
  }
}

// The element of `dtype` at `p` as text: "0.5", "nan", "-3".
std::string element_text(int32_t dtype, const uint8_t* p) {
  Tensor one;
  one.dtype = dtype;
  one.bytes.assign(p, p + kprop_dtype_size(dtype));
  return is_real(dtype) ? fmt::format("{}", one.to_doubles()[0]) : fmt::format("{}", one.to_ints()[0]);
}

// "2,5": element `flat` of `shape` as an index.
std::string index_of(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return fmt::format("{}", fmt::join(index, ","));
}
}  // namespace

void check_guards(Message& reply, const std::vector<std::string>& partly_written) {
  for (auto& t : reply.tensors) {
    const size_t n = t.nbytes();
    for (size_t i = n; i < t.bytes.size(); ++i)
      if (t.bytes[i] != kGuardByte)
        throw TargetFailure("error",
                            fmt::format("{}: the target wrote past the end of output {} (byte {} after "
                                        "its {} bytes changed)",
                                        reply.op, t.describe(), i - n, n));
    t.bytes.resize(n);
    // A float element the kernel never wrote reads as NaN, which passed
    // wherever NaN is the right answer (a sort's NaN tail, an output
    // copying an input's NaN): the call is an error instead.
    if (std::find(partly_written.begin(), partly_written.end(), t.name) != partly_written.end()) continue;
    if (const int64_t e = first_unwritten(t); e >= 0)
      throw TargetFailure("error", fmt::format("{}: output {}[{}] was never written (it still holds kprop's "
                                               "poison bytes; output {})",
                                               reply.op, t.name, index_of(e, t.shape), t.describe()));
  }
}

// ---------------------------------------------------------------- device tensors
// Ops a plugin declares with kprop_op_device(op) == KPROP_CUDA get their
// tensors in CUDA memory. Only the plugin host process (a forked child)
// touches CUDA, through the runtime it loads with dlopen: prop_runner itself
// needs no CUDA and runs where there is none.
namespace {
namespace cuda {
using Err = int;  // cudaError_t; cudaSuccess == 0
constexpr int kHostToDevice = 1, kDeviceToHost = 2;

struct Runtime {
  Err (*get_device_count)(int*) = nullptr;
  Err (*malloc)(void**, size_t) = nullptr;
  Err (*free)(void*) = nullptr;
  Err (*memcpy)(void*, const void*, size_t, int) = nullptr;
  Err (*memset)(void*, int, size_t) = nullptr;
  Err (*synchronize)() = nullptr;
  Err (*get_last_error)() = nullptr;
  const char* (*error_name)(Err) = nullptr;
  const char* (*error_string)(Err) = nullptr;
  std::string missing;  // why it could not be loaded; empty when loaded

  std::string describe(Err e) const { return fmt::format("{}: {}", error_name(e), error_string(e)); }
};

template <typename Fn>
bool bind(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  return fn != nullptr;
}

const Runtime& runtime() {
  static const Runtime rt = [] {
    Runtime r;
    void* lib = nullptr;
    std::string tried;
    for (const char* name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", dlerror());
    }
    if (!lib) {
      r.missing = fmt::format("no CUDA runtime ({})", tried);
      return r;
    }
    const bool ok =
        bind(lib, "cudaGetDeviceCount", r.get_device_count) && bind(lib, "cudaMalloc", r.malloc) &&
        bind(lib, "cudaFree", r.free) && bind(lib, "cudaMemcpy", r.memcpy) &&
        bind(lib, "cudaMemset", r.memset) && bind(lib, "cudaDeviceSynchronize", r.synchronize) &&
        bind(lib, "cudaGetLastError", r.get_last_error) && bind(lib, "cudaGetErrorName", r.error_name) &&
        bind(lib, "cudaGetErrorString", r.error_string);
    if (!ok) r.missing = "the CUDA runtime lacks a function kprop needs";
    return r;
  }();
  return rt;
}

// A CUDA error: the context may be unusable (sticky errors), so the plugin
// host replies with it and exits; the next case starts a fresh one.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The device side of one call: inputs copied in, outputs poisoned as on the
// host (poison_byte), copied back after a synchronize.
class Scope {
 public:
  explicit Scope(const std::string& op) : rt_(runtime()), op_(op) {
    if (!rt_.missing.empty()) throw TargetUnavailable(fmt::format("{}: no CUDA device: {}", op, rt_.missing));
    int count = 0;
    const Err e = rt_.get_device_count(&count);
    if (e != 0) throw TargetUnavailable(fmt::format("{}: no CUDA device ({})", op, rt_.describe(e)));
    if (count == 0) throw TargetUnavailable(fmt::format("{}: no CUDA device", op));
  }
  ~Scope() {
    for (void* p : allocations_) rt_.free(p);  // errors ignored: a broken context dies with the host
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // `v` and `bytes`: the host view and its storage (the tensor's, or a
  // staged copy: Staging); the device copy is of all of `bytes`, guards
  // included, its view at the same offset in it and with the same strides.
  // An input's device copy comes back too (copy_back), so Staging::finish
  // sees what the kernel wrote into it.
  kprop_tensor input(const Tensor& t, kprop_tensor v, std::vector<uint8_t>& bytes) {
    const size_t offset = offset_of(v, bytes);
    void* device = allocate(t, bytes.size());
    if (!bytes.empty()) check(rt_.memcpy(device, bytes.data(), bytes.size(), kHostToDevice), "cudaMemcpy", t);
    v.data = static_cast<uint8_t*>(device) + offset;
    v.device = KPROP_CUDA;
    outputs_.push_back({&t, &bytes, device});
    return v;
  }
  kprop_tensor output(const Tensor& t, kprop_tensor v, std::vector<uint8_t>& bytes) {
    const size_t offset = offset_of(v, bytes);
    void* device = allocate(t, bytes.size());
    // Poison and guard bytes as on the host (allocate_reply, Staging).
    check(rt_.memcpy(device, bytes.data(), bytes.size(), kHostToDevice), "cudaMemcpy", t);
    v.data = static_cast<uint8_t*>(device) + offset;
    v.device = KPROP_CUDA;
    outputs_.push_back({&t, &bytes, device});
    return v;
  }
  // After the entry point returned: a CUDA error (launch, asynchronous
  // fault, sticky context error) or nothing.
  std::optional<std::string> pending_error() {
    Err e = rt_.synchronize();
    if (e == 0) e = rt_.get_last_error();
    if (e == 0) return std::nullopt;
    return rt_.describe(e);
  }
  void copy_back() {
    for (auto& o : outputs_)
      if (!o.bytes->empty())
        check(rt_.memcpy(o.bytes->data(), o.device, o.bytes->size(), kDeviceToHost), "cudaMemcpy", *o.tensor);
  }

 private:
  struct Output {  // or an input: both come back
    const Tensor* tensor;
    std::vector<uint8_t>* bytes;
    void* device;
  };
  static size_t offset_of(const kprop_tensor& v, const std::vector<uint8_t>& bytes) {
    return bytes.empty() ? 0 : size_t(static_cast<const uint8_t*>(v.data) - bytes.data());
  }
  void* allocate(const Tensor& t, size_t size) {
    void* p = nullptr;
    // Never NULL, even for an empty tensor: NULL marks an absent optional input.
    check(rt_.malloc(&p, std::max<size_t>(size, 1)), "cudaMalloc", t);
    allocations_.push_back(p);
    return p;
  }
  void check(Err e, const char* what, const Tensor& t) {
    if (e != 0)
      throw Error(fmt::format("{}: {} for {} failed: {}", op_, what, t.describe(), rt_.describe(e)));
  }

  const Runtime& rt_;
  std::string op_;
  std::vector<void*> allocations_;
  std::vector<Output> outputs_;
};

// The scope of the call in progress in this (plugin host) process, if any.
thread_local Scope* g_scope = nullptr;
}  // namespace cuda

// ---------------------------------------------------------------- staged tensors
// A plugin's tensors never reach it as the request's or the reply's own
// storage: each is a staging buffer with guard bytes before and after it.
// Guards after the end alone (allocate_reply's) let a write just before the
// start (an index off by one downwards, a negative offset) land in the heap
// unseen: the case passed. Outputs are copied into the reply after the call.
// Inputs are read-only: after the call each staged input must still equal
// the request's (a memcmp of its rows), guards and padding included. Handed
// out writable and never compared, an input the kernel overwrote (scratch
// space, an in-place update) passed, and the invariants' later calls read
// the request's intact copy, so nothing downstream saw it either.
//
// run.padded_tensors: every tensor of two or more dimensions reaches a
// plugin with kPadElements elements after each row (its last dimension), so
// strides[ndim-2] = shape[ndim-1] + kPadElements and the outer strides
// follow. An input's padding holds 0xFE bytes (-1.7e38 in f32 and bf16,
// -5.5e303 in f64, NaN in f16, -16843010 in i32), an output's 0xFF (the
// poison): a kernel that indexes as if the tensor were contiguous reads
// another row's values or the padding, which the invariants catch (were
// it the outputs' poison, a copy of it read as an output element "never
// written"), and its writes land in an output's padding, which must come
// back untouched. kprop/abi.h tells plugins to index through the
// strides; this is what tests that they do.
//
// The guard before the data is kLeadBytes long: 256, the alignment
// cudaMalloc gives, so the data pointer is as aligned as it was without it,
// on the device and on the host (where 256 keeps operator new's 16).
constexpr size_t kLeadBytes = 256;

class Staging {
 public:
  static constexpr int64_t kPadElements = 3;  // odd: no row stays aligned to a vector width by accident
  struct Buffer {
    kprop_tensor view;
    // kLeadBytes of guard, the rows (each followed by its padding if
    // padded), kGuardBytes of guard.
    std::vector<uint8_t> bytes;
    size_t row = 0, pitch = 0, rows = 0;  // unpadded: the whole tensor as one row
    const Tensor* tensor = nullptr;
    Tensor* output = nullptr;  // null for an input
    uint8_t pad = 0;           // the padding's bytes
  };
  static constexpr uint8_t kInputPadByte = 0xFE, kOutputPadByte = 0xFF;

  explicit Staging(bool padded) : padded_(padded) {}

  Buffer& input(const Tensor& t) {
    Buffer& b = stage(t, kInputPadByte);
    for_rows(b, [&](size_t packed, size_t row_at) {
      std::copy_n(t.bytes.begin() + long(packed), b.row, b.bytes.begin() + long(row_at));
    });
    return b;
  }
  Buffer& output(Tensor& t) {
    Buffer& b = stage(t, kOutputPadByte);
    // The rows poisoned as the reply's (poison_byte), the padding 0xFF.
    for_rows(b, [&](size_t packed, size_t row_at) {
      std::copy_n(t.bytes.begin() + long(packed), b.row, b.bytes.begin() + long(row_at));
    });
    b.output = &t;
    return b;
  }
  // After the call: each staged tensor's guards and padding untouched, each
  // input's rows as the request's, each output's rows copied into the
  // reply's tensor (whose own checks follow: check_guards).
  void finish(const std::string& op) {
    for (Buffer& b : buffers_) {
      const Tensor& t = *b.tensor;
      const char* kind = b.output ? "output" : "input";
      check_guards_of(b, op, kind);
      for (size_t at = 0; b.pitch > b.row && at < b.rows * b.pitch; at += b.pitch)
        for (size_t i = kLeadBytes + at + b.row; i < kLeadBytes + at + b.pitch; ++i)
          if (b.bytes[i] != b.pad)
            throw TargetFailure(
                "error",
                fmt::format("{}: the target wrote into the padding after row {} of {} {}, whose "
                            "strides are [{}] (run.padded_tensors): index it through its strides "
                            "(kprop_offset), not as if it were contiguous",
                            op, at / b.pitch, kind, t.describe(),
                            fmt::join(std::span<const int64_t>(b.view.strides, size_t(b.view.ndim)), ",")));
      if (!b.output) check_unchanged(b, op);
    }
    for (Buffer& b : buffers_)
      if (b.output)
        for_rows(b, [&](size_t packed, size_t row_at) {
          std::copy_n(b.bytes.begin() + long(row_at), b.row, b.output->bytes.begin() + long(packed));
        });
  }

 private:
  bool pads(const Tensor& t) const { return padded_ && t.shape.size() >= 2 && t.numel() > 0; }
  // An input's rows as the request sent them, or the error naming the first
  // element the kernel changed, with its value before and after.
  static void check_unchanged(const Buffer& b, const std::string& op) {
    const Tensor& t = *b.tensor;
    for_rows(b, [&](size_t packed, size_t row_at) {
      const uint8_t* sent = t.bytes.data() + packed;
      const uint8_t* now = b.bytes.data() + row_at;
      if (std::memcmp(sent, now, b.row) == 0) return;
      const size_t size = kprop_dtype_size(t.dtype);
      size_t i = 0;
      while (std::memcmp(sent + i, now + i, size) == 0) i += size;
      throw TargetFailure(
          "error",
          fmt::format("{}: the kernel wrote into input {}: {}[{}] was {}, is now {} "
                      "(inputs are read-only; input {})",
                      op, t.name, t.name, index_of(int64_t((packed + i) / size), t.shape),
                      element_text(t.dtype, sent + i), element_text(t.dtype, now + i), t.describe()));
    });
  }
  static void check_guards_of(const Buffer& b, const std::string& op, const char* kind) {
    const size_t size = b.rows * b.pitch;
    // The changed byte nearest the data: where an off-by-one write lands.
    for (size_t i = kLeadBytes; i-- > 0;)
      if (b.bytes[i] != kGuardByte)
        throw TargetFailure("error", fmt::format("{}: the target wrote before the start of {} {} (byte {} "
                                                 "before its start changed)",
                                                 op, kind, b.tensor->describe(), kLeadBytes - i));
    for (size_t i = kLeadBytes + size; i < b.bytes.size(); ++i)
      if (b.bytes[i] != kGuardByte)
        throw TargetFailure("error", fmt::format("{}: the target wrote past the end of {} {} (byte {} "
                                                 "after its {} {}bytes changed)",
                                                 op, kind, b.tensor->describe(), i - kLeadBytes - size, size,
                                                 b.pitch > b.row ? "padded " : ""));
  }
  // f(offset of row r in the packed tensor, offset in the staging buffer)
  template <typename F>
  static void for_rows(const Buffer& b, F f) {
    for (size_t r = 0; r < b.rows; ++r) f(r * b.row, kLeadBytes + r * b.pitch);
  }
  Buffer& stage(const Tensor& t, uint8_t pad) {
    Buffer& b = buffers_.emplace_back();
    b.tensor = &t;
    b.pad = pad;
    b.view = t.view();
    if (pads(t)) {
      const int last = b.view.ndim - 1;
      int64_t stride = 1;
      for (int d = last; d >= 0; --d) {
        b.view.strides[d] = stride;
        stride *= b.view.shape[d] + (d == last ? kPadElements : 0);
      }
      b.row = size_t(t.shape.back()) * kprop_dtype_size(t.dtype);
      b.pitch = b.row + size_t(kPadElements) * kprop_dtype_size(t.dtype);
      b.rows = t.nbytes() / b.row;
    } else {
      b.row = b.pitch = t.nbytes();
      b.rows = b.row > 0 ? 1 : 0;
    }
    b.bytes.assign(kLeadBytes + b.rows * b.pitch + kGuardBytes, pad);
    std::fill_n(b.bytes.begin(), kLeadBytes, kGuardByte);
    std::fill(b.bytes.end() - kGuardBytes, b.bytes.end(), kGuardByte);
    b.view.data = b.bytes.data() + kLeadBytes;
    return b;
  }
  bool padded_;
  std::deque<Buffer> buffers_;  // stable addresses: the views point into them
};

// The staging of the plugin call in progress on this thread, if any.
thread_local Staging* g_staging = nullptr;

// Sets g_staging for one call.
class StagingScope {
 public:
  explicit StagingScope(Staging& staging) : previous_(g_staging) { g_staging = &staging; }
  ~StagingScope() { g_staging = previous_; }
  StagingScope(const StagingScope&) = delete;
  StagingScope& operator=(const StagingScope&) = delete;

 private:
  Staging* previous_;
};
}  // namespace

kprop_tensor out_view(Message& reply, const std::string& name) {
  for (auto& t : reply.tensors) {
    if (t.name != name) continue;
    if (g_staging) {
      Staging::Buffer& b = g_staging->output(t);
      return cuda::g_scope ? cuda::g_scope->output(t, b.view, b.bytes) : b.view;
    }
    return t.view();  // outside a plugin call
  }
  return reply.tensor(name).view();  // throws, naming it
}

kprop_tensor in_view(const Message& request, const std::string& name, bool optional) {
  if (const Tensor* t = request.find(name)) {
    if (g_staging) {
      Staging::Buffer& b = g_staging->input(*t);
      return cuda::g_scope ? cuda::g_scope->input(*t, b.view, b.bytes) : b.view;
    }
    return t->view();  // outside a plugin call
  }
  if (optional) return kprop_tensor{};
  return request.tensor(name).view();  // throws, naming it
}

void in_views(const Message& request, NamedViews views) {
  for (const auto& [name, view] : views) *view = in_view(request, name);
}

void out_views(Message& reply, NamedViews views) {
  for (const auto& [name, view] : views) *view = out_view(reply, name);
}

void in_attrs(const Message& request, std::initializer_list<NamedAttr> attrs) {
  for (const NamedAttr& a : attrs) {
    const nlohmann::json& value = request.attrs.at(a.name);
    if (a.i32)
      *a.i32 = value.get<int32_t>();
    else
      *a.f64 = value.get<double>();
  }
}

void read_outputs(const Message& reply,
                  std::initializer_list<std::pair<const char*, std::vector<double>*>> outputs) {
  for (const auto& [name, values] : outputs) *values = reply.tensor(name).to_doubles();
}

void throw_entry_error(int rc, const char* error, const std::string& op) {
  const std::string why = error[0] ? error : "(the kernel gave no message)";
  if (rc == KPROP_UNSUPPORTED) throw Unsupported(fmt::format("{}: {}", op, why));
  // A status the ABI does not define (a negative errno, a count) fails the
  // case all the same, and says what the entry point may return.
  const std::string unknown =
      rc == KPROP_ERROR ? ""
                        : " (not a status of kprop/abi.h: KPROP_OK 0, KPROP_ERROR 1 or KPROP_UNSUPPORTED 2)";
  throw TargetFailure("error", fmt::format("{} returned {}{}: {}", op, rc, unknown, why));
}

Message Transport::call(const Message& request) {
  Message reply = round_trip(request);
  reply.op = request.op;
  for (const auto& declared : request.outputs) {
    const Tensor* got = reply.find(declared.name);
    if (!got)
      throw TargetFailure("error",
                          fmt::format("{}: the reply has no output '{}'", request.op, declared.name));
    const bool widened = widens() && is_real(declared.dtype) && got->dtype == KPROP_F64;
    if ((got->dtype != declared.dtype && !widened) || got->shape != declared.shape)
      throw TargetFailure("error", fmt::format("{}: output {} in the reply, expected {}", request.op,
                                               got->describe(), declared.describe()));
  }
  return reply;
}

namespace {
class Widened final : public Transport {
 public:
  explicit Widened(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}
  void set_call_timeout(double seconds) override { inner_->set_call_timeout(seconds); }
  bool widens() const override { return true; }

 protected:
  Message round_trip(const Message& request) override {
    Message wide;
    wide.op = request.op;
    wide.attrs = request.attrs;
    for (const auto& t : request.tensors)
      wide.tensors.push_back(is_real(t.dtype) && t.dtype != KPROP_F64
                                 ? Tensor::of(t.name, KPROP_F64, t.shape, t.to_doubles())
                                 : t);
    for (const auto& o : request.outputs)
      wide.outputs.push_back(is_real(o.dtype) ? Tensor::declare(o.name, KPROP_F64, o.shape) : o);
    return inner_->call(wide);
  }

 private:
  std::shared_ptr<Transport> inner_;
};
}  // namespace

std::shared_ptr<Transport> widened_to_f64(std::shared_ptr<Transport> inner) {
  return std::make_shared<Widened>(std::move(inner));
}

// ---------------------------------------------------------------- frames
// "KPRP", u32 LE header length, header JSON, then the tensors' bytes back to
// back in the order the header lists them.
namespace {
constexpr char kMagic[4] = {'K', 'P', 'R', 'P'};
constexpr uint32_t kMaxHeader = 64u << 20;

nlohmann::json describe_tensors(const std::vector<Tensor>& tensors) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : tensors)
    list.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  return list;
}
}  // namespace

std::vector<uint8_t> encode_frame(const nlohmann::json& header, const std::vector<const Tensor*>& tensors) {
  // A plugin's message is bytes, not always UTF-8 (a Latin-1 "café"): bad
  // bytes become U+FFFD, never a throw here, which killed the plugin host
  // and turned the kernel's error into a crash.
  const std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  const uint32_t n = static_cast<uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const Tensor* t : tensors) out.insert(out.end(), t->bytes.begin(), t->bytes.end());
  return out;
}

namespace {
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- process trees
// A worker may start processes of its own, and one that calls setsid leaves
// the worker's process group. Every child gets a token in its environment
// (inherited by everything it starts), and the runner is a child subreaper,
// so orphans of the tree are re-parented to it rather than to init.
constexpr char kTokenVar[] = "KPROP_WORKER_TOKEN";

struct ProcEntry {
  pid_t pid, ppid;
  char state;
};

std::vector<ProcEntry> list_processes() {
  std::vector<ProcEntry> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    FILE* f = std::fopen((entry.path() / "stat").c_str(), "r");
    if (!f) continue;
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
    const char* close = std::strrchr(buf, ')');
    char state = 0;
    int ppid = 0;
    if (!close || std::sscanf(close + 1, " %c %d", &state, &ppid) != 2) continue;
    out.push_back({static_cast<pid_t>(std::stoi(name)), static_cast<pid_t>(ppid), state});
  }
  return out;
}

// `entry` whole ("KPROP_WORKER_TOKEN=123.4"), or as a prefix of the entry.
bool has_token(pid_t pid, const std::string& entry, bool prefix = false) {
  FILE* f = std::fopen(fmt::format("/proc/{}/environ", pid).c_str(), "r");
  if (!f) return false;  // gone, or not ours to read
  std::string env;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) env.append(buf, n);
  std::fclose(f);
  size_t at = 0;
  for (size_t end; (end = env.find('\0', at)) != std::string::npos; at = end + 1)
    if (const std::string_view e(env.data() + at, end - at); prefix ? e.starts_with(entry) : e == entry)
      return true;
  return false;
}

// Live (not zombie) processes of a child's tree: descendants of `root` by
// parent links, and every process carrying the child's token.
std::vector<pid_t> tree_members(pid_t root, const std::string& token_entry) {
  const auto procs = list_processes();
  std::vector<pid_t> tree{root}, out;
  for (size_t i = 0; i < tree.size(); ++i)
    for (const auto& p : procs)
      if (p.ppid == tree[i] && std::find(tree.begin(), tree.end(), p.pid) == tree.end())
        tree.push_back(p.pid);
  for (const auto& p : procs) {
    if (p.state == 'Z' || p.state == 'X' || p.pid == getpid()) continue;
    if (std::find(tree.begin(), tree.end(), p.pid) != tree.end() || has_token(p.pid, token_entry))
      out.push_back(p.pid);
  }
  return out;
}

// Killed processes that were re-parented to the runner: reaped when they die.
std::vector<pid_t>& strays() {
  static std::vector<pid_t> s;
  return s;
}
void reap_strays() {
  auto& s = strays();
  std::erase_if(s, [](pid_t p) { return waitpid(p, nullptr, WNOHANG) != 0; });  // reaped, or not our child
}

// A child process with a request pipe and a reply pipe, in its own process
// group (killed as a whole) and killed if the runner dies.
// The process groups of the running children (0: a free slot) and the
// process that started each, for kill_children(), which a signal handler
// may call: lock-free atomics. A forked process inherits the table and
// must leave its parent's children alone, hence the owner.
constexpr int kMaxChildren = 256;
std::atomic<pid_t> g_children[kMaxChildren], g_owners[kMaxChildren];
// A lock-free table's first free slot (0) takes `value`: its index, -1
// when the table is full; release_slot frees the slot holding `value`.
template <class T, size_t N>
int claim_slot(std::atomic<T> (&table)[N], T value) {
  for (size_t i = 0; i < N; ++i)
    if (T free = 0; table[i].compare_exchange_strong(free, value)) return static_cast<int>(i);
  return -1;
}
template <class T, size_t N>
void release_slot(std::atomic<T> (&table)[N], T value) {
  for (auto& slot : table)
    if (T v = value; slot.compare_exchange_strong(v, 0)) return;
}
void note_child(pid_t pid) {
  if (const int i = claim_slot(g_children, pid); i >= 0) g_owners[i] = getpid();
}
void forget_child(pid_t pid) {
  release_slot(g_children, pid);
}

// The runner's ends of every running child's pipes (fd + 1; 0: a free
// slot). fork() copies them into each new child whatever their O_CLOEXEC,
// and a child that kept a write end of its own request pipe (or another's)
// open never read EOF from it: the plugin host, which does not exec, sat
// out stop()'s second and was killed at the end of every run. A new child
// closes them all before anything else; read there lock-free, after fork.
std::atomic<int> g_runner_ends[2 * kMaxChildren];
void note_runner_end(int fd) {
  claim_slot(g_runner_ends, fd + 1);
}
void forget_runner_end(int fd) {
  release_slot(g_runner_ends, fd + 1);
}
void close_runner_ends() {
  for (auto& slot : g_runner_ends)
    if (const int f = slot.load(); f > 0) close(f - 1);
}

class Child;
// The children this process started that are running, for stop_children()
// (not a signal handler's: it takes a lock and reads /proc).
std::mutex g_live_mutex;
std::vector<Child*> g_live;

class Child {
 public:
  Child(std::string describe, std::function<void(int in_fd, int out_fd)> child_main)
      : describe_(std::move(describe)), child_main_(std::move(child_main)) {}
  ~Child() { stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool running() const { return pid_ > 0; }
  pid_t owner() const { return owner_; }  // the process that started it

  void start() {
    signal(SIGPIPE, SIG_IGN);  // a dead worker is an EPIPE, not the runner's death
    // Orphans of the child's tree (a daemonised grandchild) come to the runner.
    static const bool subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
    (void)subreaper;
    static int serial = 0;
    token_ = fmt::format("{}.{}", getpid(), ++serial);
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0)
      throw std::runtime_error(fmt::format("pipe: {}", strerror(errno)));
    note_runner_end(to_child[1]);
    note_runner_end(from_child[0]);
    std::fflush(nullptr);
    ForkSignals held;
    const pid_t pid = fork();
    if (pid > 0) held.release();
    if (pid < 0) {
      forget_runner_end(to_child[1]);
      forget_runner_end(from_child[0]);
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
      throw std::runtime_error(fmt::format("fork: {}", strerror(errno)));
    }
    if (pid == 0) {
      close_runner_ends();  // this child's own included: it reads EOF when the runner closes its end
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      prctl(PR_SET_CHILD_SUBREAPER, 0);  // not inherited anyway; the child's orphans are the runner's
      setenv(kTokenVar, token_.c_str(), 1);
      // The runner's crash guard must not run in the child: a crash here is
      // the target's, reported by the parent.
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGPIPE, SIGINT, SIGTERM})
        signal(sig, SIG_DFL);
      held.release();
      // Nothing may unwind out of the child into the runner's code.
      try {
        child_main_(to_child[0], from_child[1]);
      } catch (const std::exception& e) {
        fmt::print(stderr, "kprop: {}: {}\n", describe_, e.what());
        _exit(1);
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    setpgid(pid, pid);
    note_child(pid);
    owner_ = getpid();
    {
      const std::lock_guard<std::mutex> lock(g_live_mutex);
      g_live.push_back(this);
    }
    close(to_child[0]);
    close(from_child[1]);
    pid_ = pid;
    write_fd_ = to_child[1];
    read_fd_ = from_child[0];
    fcntl(write_fd_, F_SETFL, O_NONBLOCK);
    fcntl(read_fd_, F_SETFL, O_NONBLOCK);
  }

  // Closes the pipes (a worker exits on EOF), then kills the group: 1 s
  // for its exit-time work (docs/EXTERNAL.md, the paragraph "Shutdown."); one that exits on
  // EOF is reaped as it exits. One that had not is named on stderr: what it
  // had left to do was cut, and each run waited that second for it.
  void stop() {
    if (pid_ <= 0) return;
    close_pipes();
    bool exited = false;
    reap(1.0, &exited);
    if (!exited)
      fmt::print(stderr, "kprop: {} had not exited 1 s after its input was closed, and was killed\n",
                 describe_);
  }

  // Reaps the child after EOF or a write error and says how it ended.
  std::string death() {
    close_pipes();
    const int status = reap(1.0);
    if (WIFSIGNALED(status))
      return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (WEXITSTATUS(status) == 127) return "exited with status 127 (command not found?)";
    return fmt::format("exited with status {}", WEXITSTATUS(status));
  }

  void kill_now() {
    if (pid_ <= 0) return;
    close_pipes();
    reap(0);
  }

  enum class Io { ok, eof, timeout, interrupted };

  // Bytes the child wrote that no call asked for, read and dropped (at most
  // 1 MiB at a time): 0 when there are none (or it closed its end).
  size_t drain_unasked() {
    uint8_t buf[4096];
    size_t total = 0;
    while (total < (size_t(1) << 20)) {
      const ssize_t n = ::read(read_fd_, buf, sizeof buf);
      if (n <= 0) break;
      total += static_cast<size_t>(n);
    }
    return total;
  }

  Io write_all(const std::vector<uint8_t>& data, Clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(write_fd_, data.data() + done, data.size() - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EPIPE) return Io::eof;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return Io::eof;
      const Io w = wait(write_fd_, POLLOUT, deadline);
      if (w != Io::ok) return w;
    }
    return Io::ok;
  }

  // `done` counts the bytes read so far, also when the read stops short.
  Io read_exact(uint8_t* out, size_t size, Clock::time_point deadline, size_t& done) {
    done = 0;
    while (done < size) {
      const ssize_t n = ::read(read_fd_, out + done, size - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) return Io::eof;
      if (errno != EAGAIN && errno != EINTR) return Io::eof;
      const Io w = wait(read_fd_, POLLIN, deadline);
      if (w != Io::ok) return w;
    }
    return Io::ok;
  }

 private:
  // Polls in slices of 50 ms so that Ctrl-C (the runner's interrupt flag;
  // the signal may land on another thread and not wake this poll) stops the
  // wait at once rather than at the deadline. A child that died is EOF
  // (death() then says how) even while a process it started holds the
  // pipe open: that was a hang after case_timeout_s, not the crash it is.
  Io wait(int fd, short events, Clock::time_point deadline) const {
    for (;;) {
      if (kprop::interrupted()) return Io::interrupted;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Io::timeout;
      pollfd p{fd, events, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 50)));
      if (r > 0) return Io::ok;  // readable, writable, or hung up: the next read/write tells
      if (r < 0 && errno != EINTR) return Io::eof;
      // Exited, left waitable (WNOWAIT) for death()'s reap.
      siginfo_t info{};
      if (pid_ > 0 && waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid_)
        return Io::eof;
    }
  }

  void close_pipes() {
    for (int* fd : {&write_fd_, &read_fd_})
      if (*fd >= 0) {
        forget_runner_end(*fd);
        close(*fd);
        *fd = -1;
      }
  }
  // Waits up to `seconds` for the child to exit, then kills its whole
  // tree (its group, its descendants, every process with its token) and
  // returns the wait status (*exited_in_time: whether it exited by itself).
  int reap(double seconds, bool* exited_in_time = nullptr) {
    int status = 0;
    const bool exited = wait_for_exit(pid_, &status, seconds);
    if (exited_in_time) *exited_in_time = exited;
    kill(-pid_, SIGKILL);
    const std::string entry = fmt::format("{}={}", kTokenVar, token_);
    // A process may fork while it is being killed: repeat until the tree is
    // empty (bounded: a fork bomb outpacing SIGKILL is not stopped here).
    for (int round = 0; round < 100; ++round) {
      const auto members = tree_members(exited ? -1 : pid_, entry);  // a reaped pid may be reused
      if (members.empty()) break;
      for (pid_t p : members) {
        kill(p, SIGKILL);
        if (p != pid_ && std::find(strays().begin(), strays().end(), p) == strays().end())
          strays().push_back(p);
      }
      usleep(1000);
    }
    if (!exited) waitpid(pid_, &status, 0);
    forget_child(pid_);
    {
      const std::lock_guard<std::mutex> lock(g_live_mutex);
      std::erase(g_live, this);
    }
    reap_strays();
    pid_ = -1;
    return status;
  }

  std::string describe_;
  std::function<void(int, int)> child_main_;
  std::string token_;
  pid_t pid_ = -1, owner_ = -1;
  int write_fd_ = -1, read_fd_ = -1;
};

// Blocking frame I/O on plain fds, for the plugin host side.
bool read_fd_exact(int fd, uint8_t* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      return false;
    }
  }
  return true;
}
bool write_fd_all(int fd, const std::vector<uint8_t>& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

// Parses a header's tensor list and slices the payload that follows.
std::vector<Tensor> tensors_from(const nlohmann::json& list, const std::vector<uint8_t>& payload,
                                 size_t& offset) {
  std::vector<Tensor> out;
  if (list.is_null()) return out;
  for (const auto& item : list) {
    Tensor t = Tensor::declare(item.at("name").get<std::string>(), dtype_from_name(item.at("dtype")),
                               item.at("shape").get<std::vector<int64_t>>());
    const auto bytes = checked_nbytes(t.shape, t.dtype);
    if (!bytes) throw std::runtime_error(fmt::format("tensor {} has no valid size", t.describe()));
    const size_t n = *bytes;
    if (offset > payload.size() || n > payload.size() - offset)
      throw std::runtime_error(fmt::format("tensor '{}' runs past the end of the frame", t.name));
    t.bytes.assign(payload.begin() + static_cast<ptrdiff_t>(offset),
                   payload.begin() + static_cast<ptrdiff_t>(offset + n));
    offset += n;
    out.push_back(std::move(t));
  }
  return out;
}

// The payload of a frame from the runner (plugin host side).
size_t payload_size(const nlohmann::json& list) {
  size_t n = 0;
  if (list.is_null()) return 0;
  for (const auto& item : list) {
    const auto shape = item.at("shape").get<std::vector<int64_t>>();
    const auto bytes = checked_nbytes(shape, dtype_from_name(item.at("dtype")));
    if (!bytes || __builtin_add_overflow(n, *bytes, &n))
      throw std::runtime_error(fmt::format("tensor shape [{}] has no valid size", fmt::join(shape, ",")));
  }
  return n;
}

// The payload a reply header announces, checked against the request's
// declared outputs before a byte of it is read or allocated: the worker
// does not size the runner's memory. An error reply (and the handshake's
// reply) carries no tensors; an ok reply carries each declared output once,
// with its declared dtype and shape, in any order. Throws naming the
// mismatch.
size_t checked_reply_payload(const nlohmann::json& header, const std::vector<Tensor>& declared) {
  if (!header.is_object()) throw std::runtime_error("the header is not a JSON object");
  // A reply is ok or it is not: ok together with an error is no answer.
  if (header.value("ok", false) &&
      (header.contains("error") || header.contains("unsupported") || header.contains("unavailable")))
    throw std::runtime_error(fmt::format(
        "a reply that is ok also has \"error\", \"unsupported\" or \"unavailable\" (a declined or failed "
        "call is not ok): {}",
        header.dump()));
  const nlohmann::json list = header.value("tensors", nlohmann::json());
  if (list.is_null()) {
    if (header.value("ok", false) && !declared.empty())
      throw std::runtime_error(
          fmt::format("the reply lists no tensors (the request declared {})", declared.front().describe()));
    return 0;
  }
  if (!list.is_array()) throw std::runtime_error("\"tensors\" is not a list");
  if (!list.empty() && !header.value("ok", false))
    throw std::runtime_error(header.contains("ok") ? "a reply that is not ok carries tensors"
                                                   : "the reply has tensors but no \"ok\": true");
  std::vector<bool> seen(declared.size(), false);
  std::vector<std::string> names;
  for (const auto& d : declared) names.push_back(d.name);
  for (const auto& item : list) {
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string() || !item.contains("dtype") ||
        !item["dtype"].is_string() || !item.contains("shape") || !item["shape"].is_array())
      throw std::runtime_error(fmt::format("tensor entry {} lacks a name, dtype or shape", item.dump()));
    const std::string name = item["name"].get<std::string>();
    size_t k = 0;
    while (k < declared.size() && declared[k].name != name) ++k;
    if (k == declared.size())
      throw std::runtime_error(fmt::format("tensor '{}' was not asked for (the request declared: {})", name,
                                           names.empty() ? "none" : join(names)));
    if (seen[k]) throw std::runtime_error(fmt::format("tensor '{}' is listed twice", name));
    seen[k] = true;
    const Tensor& want = declared[k];
    std::vector<int64_t> shape;
    for (const auto& s : item["shape"]) {
      if (!s.is_number_integer())
        throw std::runtime_error(
            fmt::format("tensor '{}' has shape {}, not a list of integers", name, item["shape"].dump()));
      shape.push_back(
          s.get<int64_t>());  // a value past int64 reads as a negative or wrong number: refused below
    }
    const std::string dtype = item["dtype"].get<std::string>();
    std::vector<std::string> dtypes;
    for (int32_t d = KPROP_F32; d <= KPROP_I64; ++d) dtypes.push_back(dtype_name(d));
    if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end())
      throw std::runtime_error(
          fmt::format("tensor '{}' has unknown dtype '{}' (the request declared {}; "
                      "dtype names: {})",
                      name, dtype, want.describe(), join(dtypes)));
    if (dtype != dtype_name(want.dtype) || shape != want.shape) {
      std::string bytes = "no valid size";
      for (int32_t d = KPROP_F32; d <= KPROP_I64; ++d)
        if (dtype == dtype_name(d))
          if (const auto n = checked_nbytes(shape, d)) bytes = fmt::format("{} bytes", *n);
      throw std::runtime_error(fmt::format("tensor {} {}[{}] ({}), the request declared {}", name, dtype,
                                           fmt::join(shape, ","), bytes, want.describe()));
    }
  }
  for (size_t k = 0; k < declared.size(); ++k)
    if (!seen[k]) throw std::runtime_error(fmt::format("the reply has no output '{}'", declared[k].name));
  size_t total = 0;
  for (const auto& d : declared) {
    const auto n = checked_nbytes(d.shape, d.dtype);
    if (!n || __builtin_add_overflow(total, *n, &total))
      throw std::runtime_error(fmt::format("output {} has no valid size", d.describe()));
  }
  return total;
}

nlohmann::json request_header(const Message& m) {
  nlohmann::json h = {{"op", m.op},
                      {"attrs", m.attrs},
                      {"tensors", describe_tensors(m.tensors)},
                      {"outputs", describe_tensors(m.outputs)}};
  if (!m.dims.empty()) h["dims"] = m.dims;
  return h;
}

std::vector<const Tensor*> pointers(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> out;
  for (const auto& t : tensors) out.push_back(&t);
  return out;
}

// ---------------------------------------------------------------- the plugin host
// Runs in the forked child: serves frames by calling the plugin's entry points.
// An op in `device` gets its tensors in CUDA memory (cuda::Scope); after a
// CUDA error the host replies, then exits (the runner starts a fresh one:
// a sticky error leaves the context unusable).
// What the plugin host serves: the plugin's entry points and which ops take
// device memory, or why the plugin could not be loaded (`error`, said in
// reply to the handshake).
struct LoadedPlugin {
  std::vector<void*> symbols;
  std::vector<bool> device;
  std::string error;
};

void serve_plugin(int in_fd, int out_fd, const std::vector<PluginOp>& ops, const LoadedPlugin& plugin,
                  bool padded) {
  const std::vector<void*>& symbols = plugin.symbols;
  const std::vector<bool>& device = plugin.device;
  for (;;) {
    uint8_t head[8];
    if (!read_fd_exact(in_fd, head, 8)) return;
    const uint32_t n =
        uint32_t(head[4]) | uint32_t(head[5]) << 8 | uint32_t(head[6]) << 16 | uint32_t(head[7]) << 24;
    std::string text(n, '\0');
    if (!read_fd_exact(in_fd, reinterpret_cast<uint8_t*>(text.data()), n)) return;
    const auto header = nlohmann::json::parse(text);
    std::vector<uint8_t> payload(payload_size(header.value("tensors", nlohmann::json())));
    if (!read_fd_exact(in_fd, payload.data(), payload.size())) return;
    if (header.value("op", "") == "hello") {
      if (!plugin.error.empty()) {
        write_fd_all(out_fd,
                     encode_frame({{"ok", false}, {"load_error", true}, {"error", plugin.error}}, {}));
        return;
      }
      nlohmann::json served = nlohmann::json::array();
      for (const auto& op : ops) served.push_back(op.op);
      if (!write_fd_all(
              out_fd, encode_frame({{"ok", true}, {"abi_version", KPROP_ABI_VERSION}, {"ops", served}}, {})))
        return;
      continue;
    }
    nlohmann::json reply_header;
    Message reply;
    bool restart = false;
    try {
      Message request;
      request.op = header.at("op").get<std::string>();
      request.attrs = header.value("attrs", nlohmann::json::object());
      request.dims = header.value("dims", nlohmann::json::object());
      size_t offset = 0;
      request.tensors = tensors_from(header.value("tensors", nlohmann::json()), payload, offset);
      for (const auto& item : header.value("outputs", nlohmann::json::array()))
        request.outputs.push_back(Tensor::declare(item.at("name").get<std::string>(),
                                                  dtype_from_name(item.at("dtype").get<std::string>()),
                                                  item.at("shape").get<std::vector<int64_t>>()));
      size_t k = 0;
      while (k < ops.size() && ops[k].op != request.op) ++k;
      if (k == ops.size()) throw std::runtime_error(fmt::format("no op '{}'", request.op));
      reply = allocate_reply(request);
      Staging staging(padded);
      const StagingScope staging_scope(staging);
      if (device[k]) {
        cuda::Scope scope(request.op);  // Unsupported without a device
        cuda::g_scope = &scope;
        try {
          ops[k].invoke(symbols[k], request, reply);
        } catch (const std::exception& e) {
          cuda::g_scope = nullptr;
          if (auto cuda_error = scope.pending_error())
            throw cuda::Error(fmt::format("{}: CUDA error in the plugin: {} (the plugin said: {})",
                                          request.op, *cuda_error, e.what()));
          throw;
        }
        cuda::g_scope = nullptr;
        if (auto cuda_error = scope.pending_error())
          throw cuda::Error(fmt::format("{}: CUDA error in the plugin: {}", request.op, *cuda_error));
        scope.copy_back();
      } else {
        ops[k].invoke(symbols[k], request, reply);
      }
      staging.finish(request.op);
      check_guards(reply, ops[k].partly_written);
      reply_header = {{"ok", true}, {"tensors", describe_tensors(reply.tensors)}};
    } catch (const cuda::Error& e) {
      reply = {};
      reply_header = {
          {"ok", false}, {"error", fmt::format("{} (plugin host restarted)", e.what())}, {"restart", true}};
      restart = true;
    } catch (const Unsupported& e) {
      reply = {};
      reply_header = {{"ok", false}, {"unsupported", true}, {"error", e.what()}};
      // A target that cannot run anything here (no device) is skipped at once.
      if (dynamic_cast<const TargetUnavailable*>(&e)) reply_header["unavailable"] = true;
    } catch (const std::exception& e) {
      reply = {};
      reply_header = {{"ok", false}, {"error", e.what()}};
    }
    if (!write_fd_all(out_fd, encode_frame(reply_header, pointers(reply.tensors)))) return;
    if (restart) return;
  }
}

// A reply header as JSON, refused unless it is one: an object nested no
// deeper than a header ever is (a worker's 3-million-level array made the
// messages that print it recurse until the stack overflowed), with the
// fields kprop reads of the type it reads them as (a number as `error` was
// an exception of kprop's, reported as the target's crash).
constexpr int kMaxHeaderDepth = 16;  // a header is a map, its tensors two levels down

static nlohmann::json parse_reply_header(const std::string& text) {
  nlohmann::json h =
      nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > kMaxHeaderDepth)
          throw std::runtime_error(fmt::format("nested deeper than {} levels", kMaxHeaderDepth));
        return true;
      });
  if (!h.is_object()) throw std::runtime_error("not a JSON object");
  for (const char* key : {"ok", "restart", "unsupported", "unavailable", "load_error", "wiring"})
    if (h.contains(key) && !h[key].is_boolean())
      throw std::runtime_error(fmt::format("'{}' must be true or false", key));
  if (h.contains("error") && !h["error"].is_string()) throw std::runtime_error("'error' must be a string");
  if (h.contains("abi_version") && !h["abi_version"].is_number_integer())
    throw std::runtime_error("'abi_version' must be an integer");
  if (h.contains("ops") &&
      (!h["ops"].is_array() ||
       std::any_of(h["ops"].begin(), h["ops"].end(), [](const auto& o) { return !o.is_string(); })))
    throw std::runtime_error("'ops' must be a list of op names");
  return h;
}

// ---------------------------------------------------------------- process transports
// Both plugins (forked host) and exec workers speak frames to a child.
class ChildTransport : public Transport {
 public:
  ChildTransport(std::string target, const TransportOptions& options,
                 std::function<void(int, int)> child_main)
      : target_(std::move(target)), options_(options), child_(target_, std::move(child_main)) {}

  void set_call_timeout(double seconds) override { options_.call_timeout_s = seconds; }

  // Starts the child and shakes hands; setup errors are the user's (exit 2).
  void open() {
    try {
      start();
    } catch (const TargetFailure& e) {
      throw InputError({}, fmt::format("{}: {}", target_, e.what()));
    }
  }

 protected:
  Message round_trip(const Message& request) override {
    const TransportedCall untimed;  // timed here, not by the crash guard's watchdog
    if (!child_.running()) {
      // Restarted after a crash or hang. One that does not start again is no
      // failure of this case (its plugin file changed or cannot be loaded
      // now, its worker dies while it starts): the run cannot go on (exit 2).
      try {
        start();
      } catch (const TargetFailure& e) {
        if (e.kind() == "interrupted") throw;
        throw InputError(
            {}, fmt::format("{}: could not be restarted after its last failure: {}", target_, e.what()));
      }
    } else if (const size_t unasked = child_.drain_unasked(); unasked > 0) {
      // Read as this call's reply, they would be judged against this case.
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: {} byte(s) came after the reply to the previous call (a "
                                               "second reply, or a print to the protocol's stdout); the "
                                               "target is restarted",
                                               request.op, unasked));
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.call_timeout_s));
    const auto frame = encode_frame(request_header(request), pointers(request.tensors));
    nlohmann::json header;
    std::vector<uint8_t> payload;
    exchange(frame, deadline, request.op, request.outputs,
             fmt::format("no reply within case_timeout_s = {:g} s", options_.call_timeout_s), header,
             payload);
    // More bytes already there: not one reply (a second frame, or a print).
    if (const size_t extra = child_.drain_unasked(); extra > 0) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: the reply was followed by {} more byte(s) (a second "
                                               "reply, or a print to the protocol's stdout)",
                                               request.op, extra));
    }
    if (header.value("restart", false)) child_.stop();  // the plugin host asks for a fresh process
    if (!header.value("ok", false)) {
      // Its text as shown: a NUL would end every C string it is carried in.
      std::string error = printable(header.value("error", std::string("(no error message)")), true);
      // The plugin host's messages already name the op.
      if (error.rfind(request.op + ":", 0) == 0) error = error.substr(request.op.size() + 1);
      if (!error.empty() && error[0] == ' ') error.erase(0, 1);
      if (header.value("unavailable", false))
        throw TargetUnavailable(fmt::format("{}: {}", request.op, error));
      if (header.value("unsupported", false)) throw Unsupported(fmt::format("{}: {}", request.op, error));
      if (header.value("wiring", false))
        throw WiringError(
            fmt::format("{}: {} cannot be called with the op's arguments (its wiring, not the "
                        "kernel; no case is stored): {}",
                        request.op, options_.role, error));
      throw TargetFailure("error",
                          fmt::format("{}: {} reported an error: {}", request.op, options_.role, error));
    }
    Message reply;
    try {
      size_t offset = 0;
      reply.tensors = tensors_from(header.value("tensors", nlohmann::json()), payload, offset);
    } catch (const std::exception& e) {
      throw TargetFailure("error", fmt::format("{}: malformed reply: {}", request.op, e.what()));
    }
    return reply;
  }

 private:
  void start() {
    child_.start();
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : options_.ops) ops.push_back(op.op);
    const nlohmann::json hello = {
        {"op", "hello"}, {"abi_version", KPROP_ABI_VERSION}, {"family", options_.family}, {"ops", ops}};
    nlohmann::json header;
    std::vector<uint8_t> payload;
    // A worker may take a while to import its libraries.
    const double wait_s = options_.startup_timeout_s + options_.call_timeout_s;
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
    exchange(encode_frame(hello, {}), deadline, "hello", {},
             fmt::format("no reply to the handshake within {:g} s (start-up allowance {:g} s + "
                         "case_timeout_s = {:g} s)",
                         wait_s, options_.startup_timeout_s, options_.call_timeout_s),
             header, payload);
    if (!header.value("ok", false)) {
      // A worker that says why, or one that answers something else (`cat`
      // echoing the hello back): the reply, shortened, says what it was.
      const auto error = header.find("error");
      std::string why =
          error != header.end() && error->is_string() ? printable(error->get<std::string>(), true) : "";
      if (why.empty()) {
        std::string reply = header.dump();
        if (reply.size() > 200) reply = reply.substr(0, 200) + "...";
        why = "its reply has neither \"ok\": true nor an \"error\" message: " + reply;
      }
      child_.kill_now();  // it exits after refusing: not running, so the next call starts another
      // The plugin host could not load the plugin: its reason is the message.
      if (header.value("load_error", false)) throw TargetFailure("error", why);
      throw TargetFailure("error", "refused the handshake: " + why);
    }
    if (!header.contains("abi_version")) {
      child_.kill_now();
      throw TargetFailure("error",
                          fmt::format("its handshake reply has no \"abi_version\" (this kprop speaks {})",
                                      KPROP_ABI_VERSION));
    }
    const int version = header.value("abi_version", -1);
    if (version != KPROP_ABI_VERSION) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("speaks kprop ABI version {}, this kprop speaks {}", version,
                                               KPROP_ABI_VERSION));
    }
    std::vector<std::string> served;
    if (header.contains("ops")) served = header["ops"].get<std::vector<std::string>>();
    for (const auto& op : options_.ops) {
      if (std::find(served.begin(), served.end(), op.op) == served.end()) {
        child_.kill_now();
        throw TargetFailure("error",
                            fmt::format("does not serve op '{}' that family {} needs (it serves: {})", op.op,
                                        options_.family, served.empty() ? "none" : join(served)));
      }
    }
  }

  // Sends `frame` and reads the reply; `declared` is what an ok reply must
  // carry, `waited` says what the deadline was (for the hang message).
  void exchange(const std::vector<uint8_t>& frame, Clock::time_point deadline, const std::string& op,
                const std::vector<Tensor>& declared, const std::string& waited, nlohmann::json& header,
                std::vector<uint8_t>& payload) {
    auto fail = [&](Child::Io io) -> TargetFailure {
      // The handshake's failures say "while starting", not the op "hello":
      // a plugin loads then (its constructors run), a worker imports.
      const bool starting = op == "hello";
      if (io == Child::Io::timeout) {
        child_.kill_now();
        return TargetFailure("hang", starting ? fmt::format("hung while starting ({}); killed", waited)
                                              : fmt::format("{}: hung ({}); killed", op, waited));
      }
      if (io == Child::Io::interrupted) {
        child_.kill_now();
        return TargetFailure("interrupted",
                             (starting ? "interrupted while the " + options_.role + " was starting"
                                       : op + ": interrupted while waiting for the " + options_.role) +
                                 "; killed it");
      }
      if (starting)
        return TargetFailure("crash", fmt::format("the {} {} while starting, before it answered the "
                                                  "handshake{}",
                                                  options_.role, child_.death(),
                                                  target_.rfind("plugin:", 0) == 0
                                                      ? " (loading the plugin: its constructors run then)"
                                                      : ""));
      return TargetFailure("crash",
                           fmt::format("{}: the {} {} during the call", op, options_.role, child_.death()));
    };
    const Child::Io wrote = child_.write_all(frame, deadline);
    if (wrote == Child::Io::timeout) throw fail(wrote);
    // Read even when the write failed (the child exited): what it printed
    // before dying explains more than its exit status.
    uint8_t head[8];
    size_t got = 0;
    Child::Io io = child_.read_exact(head, 8, deadline, got);
    // Anything but our magic (even cut short by EOF) is a stray print.
    const bool stray = std::memcmp(head, kMagic, std::min<size_t>(got, 4)) != 0;
    if (!stray && wrote != Child::Io::ok) throw fail(wrote);
    if (io != Child::Io::ok && !stray) throw fail(io);
    if (stray) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: the reply does not start with \"KPRP\" (is something "
                                               "printing to the protocol's stdout?)",
                                               op));
    }
    const uint32_t n =
        uint32_t(head[4]) | uint32_t(head[5]) << 8 | uint32_t(head[6]) << 16 | uint32_t(head[7]) << 24;
    if (n > kMaxHeader) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: reply header of {} bytes, over the limit of {} (64 MiB): "
                                               "is the length little-endian?",
                                               op, n, kMaxHeader));
    }
    std::string text(n, '\0');
    if ((io = child_.read_exact(reinterpret_cast<uint8_t*>(text.data()), n, deadline, got)) != Child::Io::ok)
      throw fail(io);
    try {
      header = parse_reply_header(text);
    } catch (const std::exception& e) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: malformed reply header: {}", op, e.what()));
    }
    size_t size = 0;
    try {
      size = checked_reply_payload(header, declared);
    } catch (const std::exception& e) {
      child_.kill_now();  // its payload is unread: the stream is out of step
      throw TargetFailure("error",
                          fmt::format("{}: reply refused before reading its payload: {}", op, e.what()));
    }
    payload.resize(size);
    if ((io = child_.read_exact(payload.data(), payload.size(), deadline, got)) != Child::Io::ok) {
      // The header came and the payload stopped short: say how far, so a
      // worker that writes fewer bytes than its header's tensors (an f16
      // payload under an f32 header) is not read as a slow kernel.
      TargetFailure f = fail(io);
      if (f.kind() == "interrupted") throw f;
      throw TargetFailure(f.kind(),
                          fmt::format("{} (its reply header came, then {} of the {} payload bytes it "
                                      "announces: do the tensors' bytes match their dtype and shape?)",
                                      f.what(), got, size));
    }
  }

  std::string target_;
  TransportOptions options_;
  Child child_;
};

class InProcessTransport : public Transport {
 public:
  InProcessTransport(std::vector<PluginOp> ops, std::vector<void*> symbols, bool padded)
      : ops_(std::move(ops)), symbols_(std::move(symbols)), padded_(padded) {}

 protected:
  Message round_trip(const Message& request) override {
    for (size_t k = 0; k < ops_.size(); ++k) {
      if (ops_[k].op != request.op) continue;
      Message reply = allocate_reply(request);
      Staging staging(padded_);
      {
        const StagingScope staging_scope(staging);
        ops_[k].invoke(symbols_[k], request, reply);
      }
      staging.finish(request.op);
      check_guards(reply, ops_[k].partly_written);
      return reply;
    }
    throw TargetFailure("error", fmt::format("no op '{}'", request.op));
  }

 private:
  std::vector<PluginOp> ops_;
  std::vector<void*> symbols_;
  bool padded_;
};

// " (the file has it C++-mangled: ...)" when the plugin file holds the
// symbol's C++ name (_Z<length><name>...), i.e. the entry point was compiled
// without extern "C" (KPROP_EXPORT); "" otherwise or with no file. A plain
// byte search: the dynamic string table is in the file as text.
std::string mangled_hint(const std::string& file, const std::string& symbol) {
  if (file.empty()) return "";
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string mangled = fmt::format("_Z{}{}", symbol.size(), symbol);
  const size_t at = bytes.find(mangled);
  if (at == std::string::npos) return "";
  const size_t end = bytes.find('\0', at);
  return fmt::format(" (the file has it C++-mangled, as {}: declare it extern \"C\", e.g. with KPROP_EXPORT)",
                     bytes.substr(at, std::min<size_t>(end == std::string::npos ? 80 : end - at, 80)));
}

std::vector<void*> resolve_symbols(const TransportOptions& options,
                                   const std::function<void*(const std::string&)>& lookup,
                                   const std::string& file = "") {
  std::vector<void*> symbols;
  for (const auto& op : options.ops) {
    void* fn = lookup(op.symbol);
    if (!fn)
      throw std::runtime_error(fmt::format(
          "missing symbol {} (op {} of family {}){}; see include/kprop/{}", op.symbol, op.op, options.family,
          mangled_hint(file, op.symbol),
          options.family == "op" ? "abi/op.h (a declared op's entry point is kprop_op_ and its name)"
                                 : "abi.h"));
    symbols.push_back(fn);
  }
  return symbols;
}

// The plugin file as it was when the run opened it: a host restarted after
// a crash loads it again, and must load the same code (a plugin rebuilt
// during a run would have its cases shrunk against another kernel).
struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{};
  bool operator==(const FileIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec;
  }
};

std::optional<FileIdentity> identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileIdentity{st.st_dev, st.st_ino, st.st_size, st.st_mtim};
}

// Throws unless the ELF symbol at `address` (from dlsym) is a function: a
// variable of that name (`int kprop_abi_version = 1;`) was called, and the
// plugin host died of SIGSEGV, reported as a crash in the plugin's
// constructors. glibc's dladdr1 gives the symbol's table entry; where it
// finds none, nothing is refused.
void refuse_unless_function(void* address, const char* symbol, const std::string& file) {
  Dl_info info{};
  void* found = nullptr;
  if (!dladdr1(address, &info, &found, RTLD_DL_SYMENT) || !found) return;
  // ELF64_ST_TYPE and ELF32_ST_TYPE are one macro: the low 4 bits.
  const unsigned type = ELF64_ST_TYPE(static_cast<const ElfW(Sym)*>(found)->st_info);
  if (type == STT_FUNC || type == STT_GNU_IFUNC) return;
  throw std::runtime_error(fmt::format(
      "{} in {} is not a function (its ELF symbol type is {}{}): export it with KPROP_PLUGIN(); from "
      "kprop/abi.h",
      symbol, file, type, type == STT_OBJECT ? ", a variable" : ""));
}

// Runs in the plugin host (a forked child): loads the plugin and finds its
// entry points; a failure is kept as the handshake's error.
LoadedPlugin load_plugin(const std::string& dlpath, const TransportOptions& options,
                         const std::optional<FileIdentity>& opened) {
  LoadedPlugin p;
  try {
    if (opened && identity_of(dlpath) != opened)
      throw std::runtime_error(
          "the plugin file changed since the run opened it (rebuilt?): a restarted plugin host would run "
          "other code than the cases so far; run again");
    // RTLD_NOW: an unresolved symbol inside the plugin is reported here, not mid-run.
    void* handle = dlopen(dlpath.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw std::runtime_error(fmt::format("cannot load: {}", dlerror()));
    using VersionFn = uint32_t (*)();
    void* version_symbol = dlsym(handle, "kprop_abi_version");
    if (!version_symbol)
      throw std::runtime_error("missing symbol kprop_abi_version (add KPROP_PLUGIN(); from kprop/abi.h)");
    refuse_unless_function(version_symbol, "kprop_abi_version", dlpath);
    auto version = reinterpret_cast<VersionFn>(version_symbol);
    if (version() != KPROP_ABI_VERSION)
      throw std::runtime_error(
          fmt::format("built against kprop ABI version {}, this kprop speaks {}; rebuild "
                      "it against this kprop's include/kprop/abi.h",
                      version(), KPROP_ABI_VERSION));
    p.symbols = resolve_symbols(
        options, [&](const std::string& s) { return dlsym(handle, s.c_str()); }, dlpath);
    // Optional: the ops that want their tensors in device memory.
    p.device.assign(options.ops.size(), false);
    if (auto where = reinterpret_cast<kprop_op_device_fn>(dlsym(handle, "kprop_op_device"))) {
      for (size_t k = 0; k < options.ops.size(); ++k) {
        const int32_t d = where(options.ops[k].op.c_str());
        if (d != KPROP_HOST && d != KPROP_CUDA)
          throw std::runtime_error(
              fmt::format("kprop_op_device(\"{}\") returned {}, not KPROP_HOST ({}) or "
                          "KPROP_CUDA ({})",
                          options.ops[k].op, d, int(KPROP_HOST), int(KPROP_CUDA)));
        p.device[k] = d == KPROP_CUDA;
      }
    }
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  return p;
}

}  // namespace

void stop_children() {
  std::vector<Child*> live;
  {
    const std::lock_guard<std::mutex> lock(g_live_mutex);
    live = g_live;
  }
  // A forked process (a --jobs worker) inherits its parent's list: those
  // children are the parent's to stop.
  for (Child* c : live)
    if (c->owner() == getpid()) c->stop();
}

void kill_trees_of(pid_t owner) {
  const std::string prefix = fmt::format("{}={}.", kTokenVar, owner);
  for (const auto& p : list_processes()) {
    if (p.state == 'Z' || p.state == 'X' || p.pid == getpid()) continue;
    if (has_token(p.pid, prefix, true) && kill(p.pid, SIGKILL) == 0) strays().push_back(p.pid);
  }
  reap_strays();
}

void kill_children() noexcept {
  const pid_t self = getpid();
  for (int i = 0; i < kMaxChildren; ++i)
    if (const pid_t group = g_children[i].load(); group > 0 && g_owners[i].load() == self)
      kill(-group, SIGKILL);
}

bool is_external_target(const std::string& target) {
  return target.rfind("plugin:", 0) == 0 || target.rfind("exec:", 0) == 0;
}

void check_target_form(const std::string& target) {
  if (target.rfind("plugin:", 0) == 0 && target.size() == 7)
    throw InputError({}, "plugin: needs a path, e.g. plugin:./libmykernel.so");
  if (target.rfind("exec:", 0) == 0 && target.find_first_not_of(" \t", 5) == std::string::npos)
    throw InputError({}, "exec: needs a command, e.g. exec:python3 my_worker.py");
}

void check_target_name(const std::string& target) {
  check_target_form(target);
  if (target.rfind("plugin:", 0) != 0) return;
  const std::string path = target.substr(7);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError({}, fmt::format("{}: no such file", target));
  if (std::filesystem::is_directory(path, ec))
    throw InputError({}, fmt::format("{}: a folder, not a shared library", target));
}

std::shared_ptr<Transport> open_target(const std::string& target, const TransportOptions& options) {
  if (options.ops.empty())
    throw InputError({}, fmt::format("family {} has no external interface yet, so '{}' cannot be tested",
                                     options.family, target));
  if (target.rfind("plugin:", 0) == 0) {
    check_target_name(target);
    const std::string path = target.substr(7);
    const std::string dlpath = path.find('/') == std::string::npos ? "./" + path : path;
    // The plugin is loaded in the host, never in the runner: a constructor
    // (or kprop_abi_version, kprop_op_device) that crashes or hangs is the
    // target's failure at start-up, reported by the handshake (exit 2), and
    // what it prints goes to stderr with the rest of the host's output.
    // Loaded again by each restarted host (after a crash or hang): from the same file, unchanged.
    auto transport = std::make_shared<ChildTransport>(
        target, options, [dlpath, options, opened = identity_of(dlpath)](int in_fd, int out_fd) {
          dup2(2, 1);  // a chatty plugin's printf must not corrupt the runner's stdout
          serve_plugin(in_fd, out_fd, options.ops, load_plugin(dlpath, options, opened),
                       options.padded_tensors);
        });
    transport->open();
    return transport;
  }
  if (target.rfind("exec:", 0) == 0) {
    if (options.padded_tensors)
      throw InputError({}, fmt::format("{}: run.padded_tensors applies to plugin: targets (an exec: worker "
                                       "receives each tensor as a contiguous array)",
                                       target));
    check_target_form(target);
    const std::string command = target.substr(5);
    // A command of plain words runs as `exec COMMAND`: the worker is then the
    // shell's process itself, and no shell is left to print "Segmentation
    // fault" (25 lines of it while a crash shrank) when the worker dies of a
    // signal. Anything with shell syntax (quotes, pipes, NAME=value, ...)
    // runs as written.
    const size_t first = command.find_first_not_of(" \t");
    const std::string word = command.substr(first, command.find_first_of(" \t", first) - first);
    static const std::set<std::string> shell_words = {
        "exec", "eval", "cd", "set", "export", "ulimit", "umask", "trap",   ".",      "command",
        "time", "!",    "if", "for", "while",  "until",  "case",  "source", "builtin"};
    const bool plain =
        command.find_first_of(";&|<>()$`\\\"'\n*?[]{}~#=") == std::string::npos && !shell_words.count(word);
    const std::string script = plain ? "exec " + command : command;
    auto transport = std::make_shared<ChildTransport>(target, options, [script](int in_fd, int out_fd) {
      dup2(in_fd, 0);
      dup2(out_fd, 1);
      execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    });
    transport->open();
    return transport;
  }
  throw InputError({}, fmt::format("'{}' is not an external target (plugin:PATH or exec:COMMAND)", target));
}

std::shared_ptr<Transport> in_process(std::map<std::string, void*> symbols, const TransportOptions& options) {
  std::vector<void*> resolved;
  try {
    resolved = resolve_symbols(options, [&](const std::string& s) -> void* {
      auto it = symbols.find(s);
      return it == symbols.end() ? nullptr : it->second;
    });
  } catch (const std::runtime_error& e) {
    throw InputError({}, fmt::format("in-process target: {}", e.what()));
  }
  return std::make_shared<InProcessTransport>(options.ops, std::move(resolved), options.padded_tensors);
}

}  // namespace kprop::external
