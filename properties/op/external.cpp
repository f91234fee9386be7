// A declared op for kernels built elsewhere: each case is one request named
// after the op (op.name, default the spec's name) carrying every input as a
// named tensor in its dtype, the attrs as JSON and the declared outputs, for
// exec: workers (python/kprop_worker.py serve({name: fn})) and plugins (the
// generic entry point kprop_op_<name> of include/kprop/abi/op.h).
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kprop/target_call.h"
#include "properties/op/family.h"

namespace kprop::op {
namespace {

// Floating tensors travel in their dtype (KPROP_F32, KPROP_F64, KPROP_F16,
// KPROP_BF16), integer tensors as KPROP_I8 / KPROP_U8 / KPROP_I32 /
// KPROP_I64, masks as KPROP_U8 (0 / 1). `fp64`: floating tensors in f64 whatever their dtype (an external
// reference computing reference.Y).
int32_t abi_dtype(DType dt, bool fp64 = false) {
  switch (dt) {
    case DType::f32:
    case DType::f64:
    case DType::f16:
    case DType::bf16:
      return fp64 ? KPROP_F64 : external::abi_dtype(*float_type(dt));
    case DType::i8:
      return KPROP_I8;
    case DType::u8:
      return KPROP_U8;
    case DType::i32:
      return KPROP_I32;
    case DType::i64:
      return KPROP_I64;
    case DType::boolean:
      return KPROP_U8;
  }
  return KPROP_F64;
}

external::Tensor input_tensor(const std::string& name, DType dt, std::vector<int64_t> shape,
                              const std::vector<double>& values, bool fp64) {
  if (is_float(dt)) return external::Tensor::of(name, abi_dtype(dt, fp64), std::move(shape), values);
  const std::vector<int64_t> ints(values.begin(), values.end());
  return external::Tensor::of_ints(name, abi_dtype(dt), std::move(shape), ints);
}

// `fp64`: every floating tensor sent and asked for in f64 (an external
// reference computing reference.Y); the values are the case's either way.
Result drive(const Case& c, external::Transport& target, bool fp64 = false) {
  const Decl& d = *c.decl;
  external::Message m;
  m.op = d.name;
  for (size_t i = 0; i < d.inputs.size(); ++i)
    m.input(
        input_tensor(d.inputs[i].name, c.dtypes[i], d.extents(d.inputs[i].shape, c.dims), c.inputs[i], fp64));
  for (size_t a = 0; a < d.attrs.size(); ++a) {
    if (!d.attrs[a].labels.empty())
      m.attrs[d.attrs[a].name] = d.attrs[a].labels.at(static_cast<size_t>(c.attrs[a]));
    else if (d.attrs[a].integer)
      m.attrs[d.attrs[a].name] = static_cast<int64_t>(c.attrs[a]);
    else
      m.attrs[d.attrs[a].name] = c.attrs[a];
  }
  for (size_t i = 0; i < d.outputs.size(); ++i)
    m.output(d.outputs[i].name, abi_dtype(c.output_dtype(i), fp64), d.extents(d.outputs[i].shape, c.dims));
  for (size_t k = 0; k < d.dims.size(); ++k) m.dims[d.dims[k].name] = c.dims[k];
  const external::Message reply = target.call(m);
  Result r;
  for (size_t i = 0; i < d.outputs.size(); ++i) {
    const external::Tensor& t = reply.tensor(d.outputs[i].name);
    if (c.output_dtype(i) != DType::boolean) {
      r.outputs.push_back(t.to_doubles());
      continue;
    }
    const std::vector<int64_t> flags = t.to_flags(d.name);
    r.outputs.emplace_back(flags.begin(), flags.end());
  }
  return r;
}

// The plugin entry point of a declared op (include/kprop/abi/op.h): the
// request's tensors and attrs as name-indexed arrays, the outputs as views of
// the poisoned reply.
void invoke(void* fn, const external::Message& request, external::Message& reply) {
  std::vector<kprop_named_tensor> inputs, outputs;
  for (const auto& t : request.tensors)
    inputs.push_back({t.name.c_str(), external::in_view(request, t.name)});
  for (const auto& t : request.outputs)
    outputs.push_back({t.name.c_str(), external::out_view(reply, t.name)});
  std::vector<std::string> names;  // stable storage for the attr names
  for (const auto& [k, v] : request.attrs.items()) names.push_back(k);
  std::vector<kprop_op_attr> attrs;
  for (const auto& k : names) {
    const auto& v = request.attrs.at(k);
    if (v.is_string())
      attrs.push_back({k.c_str(), 0, 0, 0, v.get_ref<const std::string&>().c_str()});
    else
      attrs.push_back({k.c_str(), v.get<double>(), v.is_number_integer() ? 1 : 0, 0, nullptr});
  }
  const std::string json = request.attrs.dump();
  kprop_op_args a{};
  a.op = request.op.c_str();
  a.n_inputs = static_cast<int32_t>(inputs.size());
  a.n_outputs = static_cast<int32_t>(outputs.size());
  a.n_attrs = static_cast<int32_t>(attrs.size());
  a.inputs = inputs.data();
  a.outputs = outputs.data();
  a.attrs = attrs.data();
  a.attrs_json = json.c_str();
  external::call_entry(fn, a, request.op);
}

std::string quote(const std::string& s) {  // for /bin/sh
  std::string q = "'";
  for (const char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// A program the spec names (op.reference, op.mutants): exec:COMMAND |
// plugin:PATH. Started on its first call (a spec that is only listed or
// validated starts nothing), from the spec's folder, by each process that
// calls it (a --jobs worker or an isolated case's child forked after the
// runner started it starts its own: the runner's pipes are the runner's);
// its failures name it by its role in the spec ("the reference
// exec:... (spec:line:col)", "the mutant NAME (...)").
class SpecProgram final : public ExternalReference {
 public:
  SpecProgram(std::string target, const std::string& dir, std::string op, std::string where, std::string role)
      : shown_(std::move(target)), op_(std::move(op)), where_(std::move(where)), role_(std::move(role)) {
    if (shown_.rfind("exec:", 0) == 0) {
      target_ = "exec:cd " + quote(dir) + " && exec " + shown_.substr(5);
      name_ = dir == "." ? shown_ : target_;
    } else {
      std::string path = shown_.substr(7);
      path.erase(0, path.find_first_not_of(" \t"));
      target_ = "plugin:" + (path.front() == '/' ? path : dir + "/" + path);
      name_ = target_;
    }
  }

  // The command started in the spec's folder (the spec's own when that is
  // the run's), or the plugin's path from the run's folder.
  std::string name() const override { return name_; }

  Result call(const Case& c, bool fp64) const override {
    const std::lock_guard<std::mutex> lock(mutex_);
    // A mutant is under test: the run's run.padded_tensors reaches it as it
    // reaches a plugin: target (an exec: one is refused, as there).
    const bool padded = role_.rfind("mutant ", 0) == 0 && PaddedTensors::current();
    if (!transport_ || owner_ != getpid() || padded != padded_) open(padded);
    // The run's case timeout (run.case_timeout_s, --case-timeout), whichever
    // run calls it: the transport was opened by the first.
    if (const double s = CaseTimeout::current(); s > 0) transport_->set_call_timeout(s);
    try {
      return drive(c, *transport_, fp64);
    } catch (const external::TargetFailure& e) {
      throw external::TargetFailure(e.kind(), named(e.what()));
    } catch (const InputError& e) {
      throw external::TargetFailure("error", named(e.what()));
    }
  }

 private:
  // Started on the first call. A program that cannot start (no such
  // command, a worker that refuses the handshake) is the spec's error,
  // whoever the target is: exit 2 with one line, never a crash of the
  // target stored as a finding (it was, when the target is the reference).
  void open(bool padded) const {
    // A forked process's copy of its parent's transport: the parent's
    // child, over the parent's pipes. Never used or stopped here (stopping
    // it would close and kill what the parent still talks to); left as it is.
    if (transport_ && owner_ != getpid()) {
      static auto* inherited = new std::vector<std::shared_ptr<external::Transport>>;
      inherited->push_back(std::move(transport_));
    }
    // Its start-up is timed by the transport's allowance, not by the case
    // timeout of the in-process target that called it.
    const TransportedCall untimed;
    external::TransportOptions o;
    o.family = "op";
    o.ops = {{op_, plugin_symbol(op_), invoke}};
    if (role_ == "reference") o.role = "reference";
    o.padded_tensors = padded;
    if (const double s = CaseTimeout::current(); s > 0) o.call_timeout_s = s;  // the handshake's share
    // One that could not start in this process is not started again (a
    // --jobs worker checks case after case until the run stops on the error).
    if (failed_ && failed_->first == getpid()) throw failed_->second;
    try {
      transport_.reset();  // one opened for the other padding stops first
      transport_ = external::open_target(target_, o);
      owner_ = getpid();
      padded_ = padded;
    } catch (const std::exception& e) {  // InputError (set-up) or TargetFailure (the handshake)
      failed_.emplace(getpid(), InputError({}, named(e.what(), "cannot start: ")));
      throw failed_->second;
    }
  }

  // "the reference exec:COMMAND (spec:line:col): why", without the transport's own prefix
  // (the command with the folder change kprop added).
  std::string named(std::string why, const char* what = "") const {
    // A plugin keeps the path it was looked for at, from the run's folder
    // (the spec's folder joined to the path the spec gives).
    if (why.rfind(target_ + ": ", 0) == 0)
      why.erase(0, target_.rfind("plugin:", 0) == 0 && target_ != shown_ ? 7 : target_.size() + 2);
    return fmt::format("the {} {} ({}): {}{}", role_, shown_, where_, what, why);
  }

  std::string shown_, target_, name_, op_, where_, role_;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<external::Transport> transport_;
  mutable pid_t owner_ = 0;                                     // the process that opened transport_
  mutable bool padded_ = false;                                 // transport_'s run.padded_tensors
  mutable std::optional<std::pair<pid_t, InputError>> failed_;  // a start that failed, and where
};

}  // namespace

std::shared_ptr<const ExternalReference> external_reference(const std::string& target, const std::string& dir,
                                                            const std::string& op_name,
                                                            const std::string& where,
                                                            const std::string& role) {
  return std::make_shared<SpecProgram>(target, dir, op_name, where, role);
}

std::string plugin_symbol(const std::string& op_name) {
  std::string s = "kprop_op_";
  for (const char ch : op_name) s += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') ? ch : '_';
  return s;
}

void register_external(OpFamily& f) {
  const std::string name = f.decl().name;
  std::vector<std::string> outputs;
  for (const auto& o : f.decl().outputs) outputs.push_back(o.name);
  f.external({{name, plugin_symbol(name), invoke, std::move(outputs)}},
             [](const Case& c, external::Transport& target) { return drive(c, target); });
}

}  // namespace kprop::op
