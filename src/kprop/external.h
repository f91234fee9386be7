// External targets: kernels built elsewhere, tested without recompiling kprop.
//
//   --target plugin:PATH.so   a shared library with the C ABI of kprop/abi.h,
//                             run in a forked host process (a crash, abort or
//                             hang never takes the runner down);
//   --target exec:COMMAND     a persistent worker speaking the framed protocol
//                             of docs/EXTERNAL.md over its stdin/stdout.
//
// A family opts in with FamilyDef::external(ops, drive): `drive` turns a case
// into one or more requests (Messages of named tensors and attributes) sent
// through a Transport and turns the replies into the family's Result; each
// PluginOp maps a request onto the op's C args struct for plugins. The same
// Messages travel to plugins, workers and in-process ABI functions.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kprop/abi.h"

namespace kprop {
enum class FloatType;  // kprop/float_type.h
}  // namespace kprop

namespace kprop::external {

const char* dtype_name(int32_t dtype);
int32_t dtype_from_name(const std::string& name);  // throws std::runtime_error
// The kprop_tensor dtype of a case's floating-point tensors.
int32_t abi_dtype(FloatType t);

// prod(shape) * itemsize, or nothing when a dimension is negative, the dtype
// unknown or the product overflows: every size that comes from outside
// (a reply header, a frame) goes through here before anything is allocated.
std::optional<size_t> checked_nbytes(const std::vector<int64_t>& shape, int32_t dtype);

// A contiguous little-endian C-order tensor with a name.
struct Tensor {
  std::string name;
  int32_t dtype = KPROP_F64;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;  // throws std::length_error on a negative dimension or overflow
  size_t nbytes() const;  // likewise
  // Values converted to `dtype` (floats round to nearest; ints must fit).
  static Tensor of(std::string name, int32_t dtype, std::vector<int64_t> shape,
                   std::span<const double> values);
  static Tensor of_ints(std::string name, int32_t dtype, std::vector<int64_t> shape,
                        std::span<const int64_t> values);
  // A declared output: shape and dtype, no data yet.
  static Tensor declare(std::string name, int32_t dtype, std::vector<int64_t> shape);
  std::vector<double> to_doubles() const;
  std::vector<int64_t> to_ints() const;
  // A boolean output (a mask, a done flag: KPROP_U8) as 0/1; any other value
  // is a TargetFailure "error" naming `op`, the output and the element (an
  // entry the kernel left unwritten holds the 0xFF poison, which read as
  // nonzero would pass for true).
  std::vector<int64_t> to_flags(const std::string& op) const;
  // The C view of this tensor (host memory, contiguous strides).
  kprop_tensor view() const;
  std::string describe() const;  // "q f32[1,2,3,4]"
};

// One request or reply. A request names its op, carries input tensors and
// attributes and declares the outputs it expects; a reply carries outputs.
struct Message {
  std::string op;
  nlohmann::json attrs = nlohmann::json::object();
  // Request only, declared ops (family op): the case's dims by name, the
  // header's "dims" for a worker (a Python function gets those it names as
  // parameters: an output extent no input carries, K of a top-k).
  nlohmann::json dims = nlohmann::json::object();
  std::vector<Tensor> tensors;
  std::vector<Tensor> outputs;  // request only: declared (no bytes)

  const Tensor& tensor(const std::string& name) const;  // throws TargetFailure naming it
  const Tensor* find(const std::string& name) const;
  Message& input(Tensor t) {
    tensors.push_back(std::move(t));
    return *this;
  }
  Message& output(std::string name, int32_t dtype, std::vector<int64_t> shape) {
    outputs.push_back(Tensor::declare(std::move(name), dtype, std::move(shape)));
    return *this;
  }
};

// A target that crashed, hung, or reported an error. The runner saves the
// case and exits 3; `kind` is "crash", "hang" or "error". Kind "interrupted"
// is no verdict on the target: Ctrl-C arrived while kprop waited for it (the
// target was killed); the runner stops as interrupted (exit 130).
class TargetFailure : public std::runtime_error {
 public:
  TargetFailure(std::string kind, const std::string& message)
      : std::runtime_error(message), kind_(std::move(kind)) {}
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
};

// One round trip to the target. call() validates the reply against the
// request's declared outputs (names, dtypes, shapes).
class Transport {
 public:
  virtual ~Transport() = default;
  Message call(const Message& request);
  // A transport that times its calls (a child process's: exec:, plugin:)
  // gives the next ones `seconds` (TransportOptions::call_timeout_s at open).
  virtual void set_call_timeout(double seconds) { (void)seconds; }
  // true: an oracle's transport (widened_to_f64): floating-point inputs
  // travel in f64 and outputs come back in f64 whatever was declared; call()
  // accepts that, and a driver hands such an oracle fp64 values where it
  // would round them to the case's dtype for a kernel.
  virtual bool widens() const { return false; }

 protected:
  virtual Message round_trip(const Message& request) = 0;
};

// The transport of an oracle built elsewhere (prop_runner --reference
// exec:/plugin:, kprop.check(reference=fn)): every floating-point input
// travels widened to f64 (exact) and every floating-point output is asked
// for, and taken, in f64, so the user's reference computes in double
// precision as kprop's own references do; integer tensors are unchanged.
std::shared_ptr<Transport> widened_to_f64(std::shared_ptr<Transport> inner);

// How a plugin serves one op: `invoke` builds the op's C args struct from
// the request, calls the entry point `fn` and leaves the outputs in `reply`
// (pre-allocated from the declared outputs and filled with a poison pattern,
// so an output the kernel never writes reads as NaN or garbage).
struct PluginOp {
  std::string op;      // "attention.fwd"
  std::string symbol;  // "kprop_attention_fwd"
  std::function<void(void* fn, const Message& request, Message& reply)> invoke;
  // The outputs a reply carries ("o", "lse"): the kernel's contract, which
  // output coverage counts (InvariantInfo::reads names these).
  std::vector<std::string> outputs;
  // Float outputs whose contract lets some elements hold any value (beam's
  // empty slots), so a kernel may leave them unwritten: check_guards does
  // not look for the poison in these.
  std::vector<std::string> partly_written = {};
};

// The byte an output of `dtype` is filled with before the call: 0xFF for
// floats (NaN in every float type), 0x5A for integers (1515870810 in i32,
// 90 in u8: no index, token or flag). Not 0xFF there: -1 is a value
// contracts ask for (dflash's accepted tail, beam's empty slots), and an
// entry the kernel never wrote read as the right answer.
uint8_t poison_byte(int32_t dtype);
// The reply skeleton for a request: its declared outputs, poisoned
// (poison_byte), each followed by guard bytes the call must leave alone.
Message allocate_reply(const Message& request);
// After the call: a TargetFailure if it wrote past the end of an output
// (changed a guard byte), or left an element of a float output unwritten
// (still the poison, all bytes 0xFF) other than those named in
// `partly_written` (PluginOp); else the guards are removed.
void check_guards(Message& reply, const std::vector<std::string>& partly_written = {});
// A mutable C view of a reply tensor / an input view by name; an absent
// optional input gives a null view.
kprop_tensor out_view(Message& reply, const std::string& name);
kprop_tensor in_view(const Message& request, const std::string& name, bool optional = false);
// Several at once, one {name, &args.field} pair each: an op's args struct
// filled as in_views(req, {{"q", &a.q}, {"k", &a.k}}).
using NamedViews = std::initializer_list<std::pair<const char*, kprop_tensor*>>;
void in_views(const Message& request, NamedViews views);
void out_views(Message& reply, NamedViews views);
// A reply's outputs as doubles: read_outputs(reply, {{"o", &r.o}, {"lse", &r.lse}}).
void read_outputs(const Message& reply,
                  std::initializer_list<std::pair<const char*, std::vector<double>*>> outputs);
// A request's attrs into the args struct's scalar fields, each read as its
// field's type: in_attrs(req, {{"k", &a.k}, {"scale", &a.scale}}).
struct NamedAttr {
  NamedAttr(const char* attr, int32_t* field) : name(attr), i32(field) {}
  NamedAttr(const char* attr, double* field) : name(attr), f64(field) {}
  const char* name;
  int32_t* i32 = nullptr;
  double* f64 = nullptr;
};
void in_attrs(const Message& request, std::initializer_list<NamedAttr> attrs);
// {"name", &obj.name}: the pair for a field named as its tensor or attr
// (every ABI args struct and result follows that convention), so a list
// reads in_views(req, {KPROP_NAMED(a, q), KPROP_NAMED(a, k)}).
#define KPROP_NAMED(obj, field) \
  { #field, &(obj).field }

// Calls a C entry point `int fn(const Args*, char*, size_t)`, turning its
// return code into exceptions: KPROP_UNSUPPORTED -> Unsupported,
// anything else but KPROP_OK -> TargetFailure("error").
[[noreturn]] void throw_entry_error(int rc, const char* error, const std::string& op);
template <typename Args>
void call_entry(void* fn, const Args& args, const std::string& op) {
  char error[1024] = {0};
  using Fn = int (*)(const Args*, char*, size_t);
  const int rc = reinterpret_cast<Fn>(fn)(&args, error, sizeof error - 1);
  if (rc != KPROP_OK) throw_entry_error(rc, error, op);
}

// ---------------------------------------------------------------- transports
struct TransportOptions {
  std::string family;
  std::vector<PluginOp> ops;   // the family's ops (plugin symbols; names for the worker handshake)
  double call_timeout_s = 30;  // a call longer than this is a hang
  // The handshake waits startup_timeout_s + call_timeout_s: a worker may
  // take a while to import its libraries.
  double startup_timeout_s = 60;
  std::string role = "target";  // or "reference": what its error messages call it
  // run.padded_tensors: a plugin's tensors of two or more dimensions come
  // with their rows padded (src/external.cpp, Padding); an exec: target is
  // refused (its worker receives contiguous arrays).
  bool padded_tensors = false;
};

// "plugin:PATH" or "exec:COMMAND": starts the target and checks its ABI
// version and ops; a bad path, version or symbol throws InputError.
// A plugin exporting kprop_op_device (kprop/abi.h) gets the tensors of the
// ops it names in CUDA memory; the CUDA runtime is loaded (dlopen) only then,
// in the plugin host process.
// Process hygiene: the runner becomes a child subreaper, and stopping a
// child kills its whole tree (its process group, its descendants, and every
// process that inherited the child's KPROP_WORKER_TOKEN environment entry,
// setsid or not).
std::shared_ptr<Transport> open_target(const std::string& target, const TransportOptions& options);
bool is_external_target(const std::string& target);
// SIGKILLs the process group of every child this process started (exec:
// workers, plugin hosts) that is still running. Async-signal-safe: for a
// --jobs worker that is told to stop mid-call, so that its children die
// before their pipes close, not after (a worker writing its reply to a
// closed pipe printed a BrokenPipeError traceback on the user's terminal).
void kill_children() noexcept;
// Stops every child this process started that is still running, as its
// transport would: EOF, a second for its exit-time work, then its whole
// tree (group, descendants, every process with its token, setsid or not).
// Not for a signal handler (kill_children is). A --jobs worker calls it
// before it exits (its children's setsid descendants outlived the run).
void stop_children();
// SIGKILLs every process still carrying a token of the children that
// process `owner` (a --jobs worker, now gone) started: the setsid
// descendants of a worker that was stopped mid-call by SIGTERM, whose
// handler could kill only its children's process groups.
void kill_trees_of(pid_t owner);
// What the name alone says is wrong (plugin: without a path, exec: without
// a command): the InputError open_target would throw. The spec loader
// checks a spec's target with it, where the file's position is known.
void check_target_form(const std::string& target);
// check_target_form, then what the file system says (a plugin's path that is
// missing or names a folder), raised before the run prints anything.
void check_target_name(const std::string& target);

// In-process entry points (the GoogleTest helper): symbol name -> function.
std::shared_ptr<Transport> in_process(std::map<std::string, void*> symbols, const TransportOptions& options);

// Frame codec of docs/EXTERNAL.md (exposed for tests).
std::vector<uint8_t> encode_frame(const nlohmann::json& header, const std::vector<const Tensor*>& tensors);

}  // namespace kprop::external
