// kprop._kprop: kprop's runner inside a Python process (docs/PYTHON.md).
//
// A Python callable becomes an external target through an in-process
// Transport: each request of the family's `drive` reaches the Python
// trampoline (kprop/_check.py) as NumPy arrays that are views of kprop's own
// buffers (inputs read-only; outputs poisoned as for plugins and
// workers), so every invariant of the spec runs unchanged. The GIL is held
// for the whole run: the runner calls Python on this thread only.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <csignal>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kprop/corpus.h"
#include "kprop/errors.h"
#include "kprop/external.h"
#include "kprop/family.h"
#include "kprop/reasons.h"
#include "kprop/report.h"
#include "kprop/runner.h"
#include "kprop/spec.h"

namespace nb = nanobind;

namespace {

using kprop::external::Message;
using kprop::external::TargetFailure;
using kprop::external::Tensor;

nb::object to_py(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return nb::none();
    case nlohmann::json::value_t::boolean:
      return nb::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return nb::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return nb::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return nb::float_(j.get<double>());
    case nlohmann::json::value_t::string:
      return nb::str(j.get<std::string>().c_str());
    case nlohmann::json::value_t::array: {
      nb::list l;
      for (const auto& x : j) l.append(to_py(x));
      return l;
    }
    case nlohmann::json::value_t::object: {
      nb::dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d[it.key().c_str()] = to_py(it.value());
      return d;
    }
    default:
      throw std::runtime_error("kprop: an attribute of a type Python cannot take");
  }
}

nb::dlpack::dtype dl_dtype(int32_t dtype) {
  using nb::dlpack::dtype_code;
  auto d = [](dtype_code code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (dtype) {
    case KPROP_F32:
      return d(dtype_code::Float, 32);
    case KPROP_F64:
      return d(dtype_code::Float, 64);
    case KPROP_F16:
      return d(dtype_code::Float, 16);
    case KPROP_BF16:
      return d(dtype_code::UInt, 16);  // raw bits, as the worker gives them: NumPy has no bfloat16
    case KPROP_I8:
      return d(dtype_code::Int, 8);
    case KPROP_U8:
      return d(dtype_code::UInt, 8);
    case KPROP_I32:
      return d(dtype_code::Int, 32);
    case KPROP_I64:
      return d(dtype_code::Int, 64);
    default:
      throw TargetFailure("error", fmt::format("kprop: dtype {} has no NumPy equivalent", dtype));
  }
}

// A NumPy array viewing the tensor's bytes (no copy; valid during the call).
nb::object view(const Tensor& t, bool writable) {
  static uint8_t empty = 0;  // a zero-size tensor still needs a non-null pointer
  void* data = t.bytes.empty() ? &empty : const_cast<uint8_t*>(t.bytes.data());
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  if (writable)
    return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), nb::handle(), nullptr, dl_dtype(t.dtype))
        .cast(nb::rv_policy::reference);
  return nb::ndarray<nb::numpy, nb::ro>(data, shape.size(), shape.data(), nb::handle(), nullptr,
                                        dl_dtype(t.dtype))
      .cast(nb::rv_policy::reference);
}

// Ctrl-C inside fn (KeyboardInterrupt) stops the run as prop_runner's
// Ctrl-C does: kprop's interrupt flag is raised through its own handler,
// which is installed just for that moment.
void raise_kprop_interrupt() {
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, nullptr, &old_int);
  sigaction(SIGTERM, nullptr, &old_term);
  kprop::install_interrupt_handler();
  std::raise(SIGINT);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
}

// A KeyboardInterrupt inside a Python target, reference or invariant stops
// the run (kprop's interrupt flag) and is raised again once it has stopped.
[[noreturn]] void on_keyboard_interrupt(bool& interrupted) {
  interrupted = true;
  raise_kprop_interrupt();
  throw TargetFailure("interrupted", "interrupted (KeyboardInterrupt)");
}

// Throws if a view in `inputs` (the dict the trampoline was given) is still
// referenced from elsewhere. A frame of fn kept alive by a reference cycle
// (a raised exception's traceback) holds its views until the collector runs:
// it runs once before a view is said to be kept.
void check_inputs_released(const std::string& op, const nb::dict& inputs) {
  bool collected = false;
  for (auto [name, array] : inputs) {
    if (Py_REFCNT(array.ptr()) > 1 && !collected) {
      nb::module_::import_("gc").attr("collect")();
      collected = true;
    }
    if (Py_REFCNT(array.ptr()) > 1)
      throw TargetFailure("error", fmt::format("{}: the function kept input '{}' (or a view of it) after the "
                                               "call; inputs are views valid during the call only: keep a "
                                               "copy (np.array(x))",
                                               op, nb::cast<std::string>(name)));
  }
}

class PythonTransport final : public kprop::external::Transport {
 public:
  PythonTransport(nb::object call, std::shared_ptr<bool> interrupted)
      : call_(std::move(call)), interrupted_(std::move(interrupted)) {}
  // A transport may outlive the run (a Finding's trial, a static): the
  // reference to fn is dropped when the run ends, with the GIL held.
  void detach() { call_ = nb::object(); }

 protected:
  Message round_trip(const Message& request) override {
    if (*interrupted_) throw TargetFailure("interrupted", "interrupted (KeyboardInterrupt)");
    if (!call_.is_valid()) throw TargetFailure("error", "this Python target's run has ended");
    Message reply = kprop::external::allocate_reply(request);
    nb::dict inputs;
    for (const auto& t : request.tensors) inputs[t.name.c_str()] = view(t, false);
    nb::list outputs;
    for (const auto& t : reply.tensors)
      outputs.append(nb::make_tuple(nb::str(t.name.c_str()), nb::str(kprop::external::dtype_name(t.dtype)),
                                    view(t, true)));
    nb::object status;
    try {
      status = call_(nb::str(request.op.c_str()), to_py(request.attrs), inputs, outputs, to_py(request.dims));
    } catch (nb::python_error& e) {
      if (e.matches(PyExc_KeyboardInterrupt)) on_keyboard_interrupt(*interrupted_);
      throw TargetFailure("error", fmt::format("{}: kprop's trampoline failed: {}", request.op, e.what()));
    }
    // The inputs are views of buffers that die with this call: a function
    // that kept one (or a view of one) would read freed memory later, whether
    // it returned, declined or raised.
    check_inputs_released(request.op, inputs);
    // The trampoline answers None (outputs written), or (kind, message).
    if (!status.is_none()) {
      const auto kind = nb::cast<std::string>(status[0]);
      const auto message = nb::cast<std::string>(status[1]);
      if (kind == "unsupported") throw kprop::Unsupported(fmt::format("{}: {}", request.op, message));
      if (kind == "unavailable") throw kprop::TargetUnavailable(fmt::format("{}: {}", request.op, message));
      throw TargetFailure("error", fmt::format("{}: {}", request.op, message));
    }
    kprop::external::check_guards(reply);
    return reply;
  }

 private:
  nb::object call_;
  std::shared_ptr<bool> interrupted_;
};

// A named tensor as a NumPy array of its own (a copy: an invariant may keep it).
template <typename T>
nb::object owned_array(const kprop::expr::Tensor& t) {
  T* data = new T[std::max<size_t>(t.data.size(), 1)];
  for (size_t i = 0; i < t.data.size(); ++i) data[i] = static_cast<T>(t.data[i]);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.data(), owner).cast();
}

nb::object to_numpy(const kprop::expr::Tensor& t) {
  switch (t.dtype) {
    case kprop::expr::DType::boolean:
      return owned_array<bool>(t);
    case kprop::expr::DType::integer:
      return owned_array<int64_t>(t);
    case kprop::expr::DType::real:
      break;
  }
  return owned_array<double>(t);
}

// A Python invariant (@kprop.invariant, kprop/_check.py): `call` gets a dict
// of the named tensors it reads (None for one this case does not have) and
// answers None (holds) or (kind, message) with kind "fail" or "discard".
std::shared_ptr<const kprop::CallbackInvariant> python_invariant(std::vector<std::string> names,
                                                                 std::string description, nb::object call,
                                                                 std::shared_ptr<bool> interrupted) {
  auto inv = std::make_shared<kprop::CallbackInvariant>();
  inv->names = names;
  inv->description = std::move(description);
  inv->check = [names, call = std::move(call),
                interrupted = std::move(interrupted)](const kprop::expr::TensorMap& tensors) {
    nb::dict args;
    for (const auto& n : names) {
      const kprop::expr::Tensor* t = tensors.find(n);
      args[n.c_str()] = t ? to_numpy(*t) : nb::none();
    }
    nb::object answer;
    try {
      answer = call(args);
    } catch (nb::python_error& e) {
      if (e.matches(PyExc_KeyboardInterrupt)) on_keyboard_interrupt(*interrupted);
      return kprop::Verdict::fail(fmt::format("kprop's invariant trampoline failed: {}", e.what()));
    }
    if (answer.is_none()) return kprop::Verdict::pass();
    const auto kind = nb::cast<std::string>(answer[0]);
    auto message = nb::cast<std::string>(answer[1]);
    if (kind == "discard") return kprop::Verdict::discard(std::move(message));
    return kprop::Verdict::fail(std::move(message));
  };
  return inv;
}

// `domain`: domain keys replaced for this run (prop_runner's --domain), a
// YAML/JSON map; "" for none.
// `max_case_mb`: run.max_case_mb for this run (prop_runner's --max-case-mb), 0 for the spec's.
kprop::Spec load(const std::string& spec, bool is_text, const std::string& profile,
                 const std::string& domain = "", int64_t max_case_mb = 0) {
  return is_text ? kprop::parse_spec(spec, "<dict>", profile, domain, max_case_mb)
                 : kprop::load_spec(spec, profile, domain, max_case_mb);
}

// The handlers kprop's crash guard installs (SIGSEGV, ...) are kprop's only
// while a run is under way; Python's (faulthandler) come back after it.
class SignalScope {
 public:
  SignalScope() {
    for (size_t k = 0; k < kSignals.size(); ++k) {
      sigaction(kSignals[k], nullptr, &outer_[k]);
      if (kprop_saved()) sigaction(kSignals[k], &kprop_handlers()[k], nullptr);
    }
  }
  ~SignalScope() {
    for (size_t k = 0; k < kSignals.size(); ++k) {
      struct sigaction now {};
      sigaction(kSignals[k], nullptr, &now);
      if (now.sa_handler != outer_[k].sa_handler) {
        kprop_handlers()[k] = now;
        kprop_saved() = true;
      }
      sigaction(kSignals[k], &outer_[k], nullptr);
    }
  }

 private:
  static constexpr std::array<int, 5> kSignals = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  static std::array<struct sigaction, 5>& kprop_handlers() {
    static std::array<struct sigaction, 5> h{};
    return h;
  }
  static bool& kprop_saved() {
    static bool saved = false;
    return saved;
  }
  std::array<struct sigaction, 5> outer_{};
};

nb::dict finding_dict(const kprop::Finding& f) {
  nb::dict d;
  d["invariant"] = f.invariant;
  d["kind"] = f.kind;
  d["message"] = f.message;
  d["while_checking"] = f.while_checking;
  nb::list measured;
  for (const auto& m : f.measured) measured.append(nb::make_tuple(m.name, m.value));
  d["measured"] = measured;
  d["case_yaml"] = f.case_yaml;
  d["size"] = f.stats.size;
  d["summary"] = f.stats.summary;
  d["original_size"] = f.original_size;
  d["shrink_steps"] = f.shrink_steps;
  d["shrink_seconds"] = f.shrink_seconds;
  d["shrink_interrupted"] = f.shrink_interrupted;
  d["path"] = f.corpus_path;
  d["in_corpus"] = f.in_corpus;
  d["corpus_new"] = f.corpus_new;
  d["store_note"] = f.store_note;
  d["replay_command"] = f.replay_command;
  return d;
}

nb::dict counts(const std::map<std::string, int64_t>& m) {
  nb::dict d;
  for (const auto& [k, v] : m) d[k.c_str()] = v;
  return d;
}

nb::dict report_dict(const kprop::RunReport& r) {
  nb::dict d;
  d["spec"] = r.spec;
  d["spec_path"] = r.spec_path;
  d["family"] = r.family;
  d["target"] = r.target;
  d["reference"] = r.reference;
  d["seed"] = r.seed;
  d["trials"] = r.trials;
  d["trials_wanted"] = r.trials_wanted;
  d["checked"] = r.checked;
  d["seconds"] = r.seconds;
  d["time_budget_hit"] = r.time_budget_hit;
  d["stopped_at_failure"] = r.stopped_at_failure;
  d["max_size"] = r.max_size;
  d["size_reached"] = r.size_reached;
  d["largest_case"] = r.largest_case;
  d["status"] = kprop::run_status_name(r.status);
  d["detail"] = r.detail;
  d["discarded"] = r.discarded;
  d["focused"] = counts(r.focused);
  d["declined"] = r.declined;
  d["decline_reasons"] = counts(kprop::grouped_reason_counts(r.decline_reasons));
  nb::list invariants;
  for (const auto& i : r.invariants) {
    nb::dict x;
    x["name"] = i.name;
    x["status"] = kprop::invariant_status_name(i.status);
    x["passed"] = i.passed;
    x["discarded"] = i.discarded;
    x["declined"] = i.declined;
    x["not_applicable"] = i.not_applicable;
    x["trials_to_fail"] = i.trials_to_fail;
    x["last_discard"] = i.last_discard;
    x["discard_reasons"] = counts(kprop::grouped_reason_counts(i.discard_reasons));
    x["counterexample"] = i.counterexample ? nb::object(finding_dict(*i.counterexample)) : nb::none();
    invariants.append(x);
  }
  d["invariants"] = invariants;
  d["crash"] = r.crash ? nb::object(finding_dict(*r.crash)) : nb::none();
  nb::list health;
  for (const auto& h : r.health) health.append(nb::make_tuple(h.check, h.message));
  d["health"] = health;
  // The targeted search (search=): None when it did not run.
  if (r.search.ran) {
    nb::dict s;
    s["cases"] = r.search.cases;
    s["checked"] = r.search.checked;
    s["declined"] = r.search.declined;
    s["rejected"] = r.search.rejected;
    s["seconds"] = r.search.seconds;
    s["time_budget_hit"] = r.search.time_budget_hit;
    s["note"] = r.search.note;
    nb::list hunted;
    for (const auto& si : r.search.invariants) {
      nb::dict x;
      x["name"] = si.name;
      x["start_ratio"] = si.start_ratio;
      x["search_ratio"] = si.worst_ratio;  // the search's own passing cases
      x["passed"] = si.passed;
      x["improvements"] = si.improvements;
      x["failed"] = si.failed;
      hunted.append(x);
    }
    s["invariants"] = hunted;
    d["search"] = s;
  } else {
    d["search"] = nb::none();
  }
  return d;
}

// One Python function as the target or the reference: in process (`call`,
// the trampoline of kprop/_check.py) or in a worker process (`exec`, the
// command of `python -m kprop.worker`).
struct PyImpl {
  std::string name;
  nb::object call;
  std::optional<std::string> exec;
};

// kprop.check's arguments after the spec.
struct Args {
  PyImpl target;
  std::optional<PyImpl> reference;  // none: the spec's reference
  // @kprop.invariant functions: (name, tensors read, description, trampoline)
  std::vector<std::tuple<std::string, std::vector<std::string>, std::string, nb::object>> extra;
  std::string profile;
  std::string domain;       // domain keys replaced, a JSON map ("" for none)
  int64_t max_case_mb = 0;  // max_case_mb= (0: the spec's)
  std::optional<uint64_t> seed;
  std::optional<int64_t> trials;
  std::optional<double> time_s;
  std::vector<std::string> invariants;
  std::optional<std::string> corpus;
  std::string scratch;
  std::optional<double> case_timeout_s;
  bool fail_fast = false;                          // prop_runner --fail-fast
  std::vector<std::string> suppress_health_check;  // prop_runner --suppress-health-check
  std::optional<bool> search;                      // search=: on, off, or the spec's
  std::optional<int64_t> search_trials;            // search=N
  std::optional<double> search_time_s;             // search_time=
};

// kprop/_check.py's _args() dict (plain Python objects only: nothing of this
// module outlives a run).
template <typename T>
std::optional<T> optional_item(const nb::dict& d, const char* key) {
  if (!d.contains(key) || d[key].is_none()) return std::nullopt;
  return nb::cast<T>(d[key]);
}

PyImpl impl_from(const nb::handle& h) {
  const nb::dict d = nb::cast<nb::dict>(h);
  return {nb::cast<std::string>(d["name"]), nb::borrow<nb::object>(d["call"]),
          optional_item<std::string>(d, "exec")};
}

Args args_from(const nb::dict& d) {
  Args a;
  a.target = impl_from(d["target"]);
  if (d.contains("reference") && !d["reference"].is_none()) a.reference = impl_from(d["reference"]);
  for (nb::handle x : nb::cast<nb::list>(d["extra"])) {
    const nb::tuple t = nb::cast<nb::tuple>(x);
    a.extra.emplace_back(nb::cast<std::string>(t[0]), nb::cast<std::vector<std::string>>(t[1]),
                         nb::cast<std::string>(t[2]), nb::borrow<nb::object>(t[3]));
  }
  a.profile = nb::cast<std::string>(d["profile"]);
  a.domain = nb::cast<std::string>(d["domain"]);
  a.max_case_mb = optional_item<int64_t>(d, "max_case_mb").value_or(0);
  a.seed = optional_item<uint64_t>(d, "seed");
  a.trials = optional_item<int64_t>(d, "trials");
  a.time_s = optional_item<double>(d, "time");
  a.invariants = nb::cast<std::vector<std::string>>(d["invariants"]);
  a.corpus = optional_item<std::string>(d, "corpus");
  a.scratch = nb::cast<std::string>(d["scratch"]);
  a.case_timeout_s = optional_item<double>(d, "case_timeout");
  a.fail_fast = optional_item<bool>(d, "fail_fast").value_or(false);
  a.search = optional_item<bool>(d, "search");
  a.search_trials = optional_item<int64_t>(d, "search_trials");
  a.search_time_s = optional_item<double>(d, "search_time");
  if (d.contains("suppress_health_check"))
    a.suppress_health_check = nb::cast<std::vector<std::string>>(d["suppress_health_check"]);
  return a;
}

// The spec with the Python invariants added, and the options with the
// target and reference (this run's own transports) and the overrides.
struct Prepared {
  kprop::Spec spec;
  kprop::RunOptions options;
  std::shared_ptr<bool> interrupted = std::make_shared<bool>(false);
  std::vector<std::shared_ptr<PythonTransport>> transports;
};

// An input error as a Python caller says it: the loader names a domain=
// override as prop_runner's option, at a line and column of the JSON this
// package made of the dict ("--domain:1:2: unknown key ..."): "domain=: ...".
// Likewise prop_runner's --max-case-mb is max_case_mb=.
std::string in_python_words(const kprop::InputError& e) {
  std::string m = e.what();
  for (size_t at = m.find("(--max-case-mb)"); at != std::string::npos; at = m.find("(--max-case-mb)", at))
    m.replace(at, 15, "(max_case_mb=)");
  if (m.rfind("--domain:", 0) != 0) return m;
  const size_t at = m.find(": ");
  return at == std::string::npos ? m : "domain=: " + m.substr(at + 2);
}

Prepared prepare(const std::string& spec_arg, bool spec_is_text, const Args& a) {
  Prepared p = [&] {
    try {
      return Prepared{load(spec_arg, spec_is_text, a.profile, a.domain, a.max_case_mb), {}};
    } catch (const kprop::InputError& e) {  // a bad profile or domain= override
      throw nb::value_error(in_python_words(e).c_str());
    }
  }();
  const kprop::Family& family = *p.spec.family;
  if (family.external_ops().empty())
    throw nb::value_error(
        fmt::format("family {} has no external interface, so it cannot be tested from Python", family.name())
            .c_str());
  std::set<std::string> published;
  for (const auto& t : family.tensor_infos()) published.insert(t.name);
  for (const auto& [name, names, description, call] : a.extra) {
    for (const auto& u : p.spec.invariants)
      if (u.name == name)
        throw nb::value_error(
            fmt::format("invariant '{}' is already one of spec {}'s invariants: name yours otherwise", name,
                        p.spec.name)
                .c_str());
    for (const auto& n : names)
      if (!published.count(n))
        throw nb::value_error(
            fmt::format("invariant '{}' reads '{}', which family {} does not publish", name, n, family.name())
                .c_str());
    kprop::InvariantUse use;
    use.name = name;
    use.callback = python_invariant(names, description, call, p.interrupted);
    p.spec.invariants.push_back(std::move(use));
  }
  for (const auto& inv : a.invariants)
    if (std::none_of(p.spec.invariants.begin(), p.spec.invariants.end(),
                     [&](const kprop::InvariantUse& u) { return u.name == inv; })) {
      std::vector<std::string> names;
      for (const auto& u : p.spec.invariants) names.push_back(u.name);
      throw nb::value_error(
          fmt::format("spec {} has no invariant '{}'{}", p.spec.name, inv, kprop::suggestion(inv, names))
              .c_str());
    }
  auto& suppressed = p.spec.run.suppress_health_check;
  for (const auto& check : a.suppress_health_check)
    if (std::find(suppressed.begin(), suppressed.end(), check) == suppressed.end())
      suppressed.push_back(check);
  kprop::RunOptions& o = p.options;
  // In process there is no isolation: kprop's watchdog would end the whole
  // interpreter on a slow case, so it waits as long as fn takes (isolate=True
  // enforces run.case_timeout_s).
  o.case_timeout_s = a.target.exec ? a.case_timeout_s : a.case_timeout_s.value_or(1e7);
  // Each Python function is this run's own implementation (run-local: the
  // family is unchanged); a worker (isolate=True) is opened by the run.
  auto use = [&](const PyImpl& impl, std::string& name,
                 std::shared_ptr<kprop::external::Transport>& transport) {
    if (impl.exec) {
      name = "exec:" + *impl.exec;
      return;
    }
    auto t = std::make_shared<PythonTransport>(impl.call, p.interrupted);
    p.transports.push_back(t);
    name = impl.name;
    transport = std::move(t);
  };
  // A Python function or worker receives NumPy arrays, never padded rows:
  // said, not silently ignored.
  if (p.spec.run.padded_tensors)
    throw nb::value_error(fmt::format("spec {}: run.padded_tensors applies to plugin: targets run by "
                                      "prop_runner (a Python target receives contiguous NumPy arrays)",
                                      p.spec.name)
                              .c_str());
  use(a.target, o.target, o.target_transport);
  if (a.reference) use(*a.reference, o.reference, o.reference_transport);
  o.seed = a.seed;
  o.trials = a.trials;
  o.time_budget_s = a.time_s;
  o.only_invariants = a.invariants;
  o.stop_on_first_failure = a.fail_fast;
  o.search = a.search;
  o.search_trials = a.search_trials;
  o.search_time_budget_s = a.search_time_s;
  o.write_corpus = a.corpus.has_value();
  if (a.corpus) o.corpus_dir = *a.corpus;
  o.scratch_dir = a.scratch;
  o.found_by = "python";
  return p;
}

// Runs `body` with Python's signal handlers kept. A KeyboardInterrupt inside
// fn (Ctrl-C, or the package's _Stop for a pytest.skip() and the like) stops
// the runner; `stopped` says so, and what the run found up to there is
// returned all the same: the package decides what to raise (a counterexample
// found before the stop is never hidden behind it).
template <typename F>
auto guarded(Prepared& p, bool& stopped, F&& body) {
  kprop::clear_interrupt();
  struct Detach {
    Prepared& p;
    ~Detach() {
      for (const auto& t : p.transports) t->detach();
    }
  } detach{p};
  auto result = [&] {
    SignalScope signals;
    try {
      return body();
    } catch (const kprop::WiringError& e) {  // the package raises kprop.ArgumentMismatch (a TypeError)
      throw nb::type_error(e.what());
    } catch (const kprop::InputError& e) {
      throw nb::value_error(in_python_words(e).c_str());
    }
  }();
  stopped = *p.interrupted;
  kprop::clear_interrupt();
  return result;
}

nb::dict run(const std::string& spec, bool spec_is_text, const nb::dict& args) {
  Prepared p = prepare(spec, spec_is_text, args_from(args));
  bool stopped = false;
  kprop::RunReport report = guarded(p, stopped, [&] { return kprop::run_spec(p.spec, p.options); });
  nb::dict d = report_dict(report);
  d["stopped"] = stopped;
  return d;
}

// {"rows": one dict per case file replayed, "stopped": whether fn stopped the replay}.
nb::dict replay(const std::string& spec, bool spec_is_text, const nb::dict& arg_dict,
                const std::string& path) {
  Args args = args_from(arg_dict);
  args.seed = std::nullopt;
  args.trials = std::nullopt;
  args.time_s = std::nullopt;
  args.corpus =
      std::nullopt;  // a replay stores nothing; a crash's case goes to the scratch folder _args chose
  Prepared p = prepare(spec, spec_is_text, args);
  bool stopped = false;
  const auto rows = guarded(p, stopped, [&] { return kprop::replay_corpus(p.spec, path, p.options); });
  nb::list out;
  for (const auto& r : rows) {
    nb::dict d;
    d["path"] = r.path;
    d["error"] = r.error;
    d["declined"] = r.declined;
    d["invariant"] = r.invariant;
    d["found_against"] = r.found_against;
    d["ok"] = r.target_ok;
    d["checked"] = r.checked > 0;  // an invariant checked it (a discard or n/a is no check)
    d["detail"] = r.target_detail;
    d["failed_invariant"] = r.failed_invariant;
    // The file no longer guards its mutant (stale, or the mutant now passes):
    // an error of the corpus file, as an unreadable one is.
    d["stale"] = r.mutant_checked && !r.mutant_still_fails
                     ? nb::object(nb::str(kprop::mutant_failure(r).c_str()))
                     : nb::none();
    d["replay_command"] = r.replay_command;
    out.append(d);
  }
  nb::dict result;
  result["rows"] = out;
  result["stopped"] = stopped;
  return result;
}

nb::dict spec_info(const std::string& spec_arg, bool spec_is_text, const std::string& profile,
                   int64_t max_case_mb, const std::string& domain) {
  try {
    const kprop::Spec spec = load(spec_arg, spec_is_text, profile, domain, max_case_mb);
    nb::dict d;
    d["name"] = spec.name;
    d["path"] = spec.path;
    d["family"] = spec.family->name();
    d["target"] = spec.target;
    d["reference"] = spec.reference;
    d["seed"] = spec.run.seed;
    d["trials"] = spec.run.trials;
    d["case_timeout_s"] = spec.run.case_timeout_s;
    nb::list invariants;
    for (const auto& u : spec.invariants) invariants.append(u.name);
    d["invariants"] = invariants;
    nb::list ops;
    for (const auto& op : spec.family->external_ops()) ops.append(op.op);
    d["ops"] = ops;
    nb::list profiles;
    for (const auto& name : spec.profiles) profiles.append(name);
    d["profiles"] = profiles;
    d["profile"] = spec.profile;
    nb::dict tensors;  // name -> (symbolic shape, dtype, meaning)
    for (const auto& t : spec.family->tensor_infos()) {
      nb::list shape;
      for (const auto& dim : t.shape) shape.append(dim);
      tensors[t.name.c_str()] = nb::make_tuple(shape, kprop::expr::dtype_name(t.dtype), t.meaning);
    }
    d["tensors"] = tensors;
    return d;
  } catch (const kprop::InputError& e) {
    throw nb::value_error(in_python_words(e).c_str());
  }
}

// The invariants a stored case file records: its top-level one, then each
// of also_found_against's ("" for a target that crashed, hung or raised).
// Empty for a file that does not read: the replay reports why.
std::vector<std::string> stored_invariants(const std::string& path) {
  try {
    const kprop::CorpusEntry e = kprop::read_entry(path);
    std::vector<std::string> names = {e.invariant};
    for (const auto& a : e.also) names.push_back(a.invariant);
    return names;
  } catch (const kprop::InputError&) {
    return {};
  }
}

// The spec a stored case file names ("" for a file that does not read).
std::string stored_spec(const std::string& path) {
  try {
    return kprop::read_entry(path).spec;
  } catch (const kprop::InputError&) {
    return "";
  }
}

// Who stored a case file (its found_by: "python" for kprop.check, ...; ""
// for a hand-written file, or one that does not read).
std::string stored_found_by(const std::string& path) {
  try {
    return kprop::read_entry(path).found_by;
  } catch (const kprop::InputError&) {
    return "";
  }
}

// The case a stored file holds, as a finding's case_yaml is (the file's
// `case:` alone, not its header); "" for a file that does not read.
std::string stored_case(const std::string& path) {
  try {
    return kprop::emit_yaml(kprop::read_entry(path).case_node);
  } catch (const kprop::InputError&) {
    return "";
  }
}

// Why a stored case lies outside the domain of a run of this spec (its
// profile, then the domain= override, as kprop.check loads them): the
// family's own in_domain, what its generator, shrinker and search keep to,
// so the Python package need not know any family's domain keys. "" when the
// case is inside, or when the file does not read as a case of this spec
// (the replay then says why).
std::string stored_outside_domain(const std::string& spec_arg, bool spec_is_text, const std::string& profile,
                                  const std::string& domain, int64_t max_case_mb, const std::string& path) {
  kprop::Spec spec = [&] {
    try {
      return load(spec_arg, spec_is_text, profile, domain, max_case_mb);
    } catch (const kprop::InputError& e) {
      throw nb::value_error(in_python_words(e).c_str());
    }
  }();
  try {
    const kprop::CorpusEntry e = kprop::read_entry(path);
    if (e.spec != spec.name) return "";  // another spec's case: the replay says so
    return spec.family->in_domain(spec.family->from_yaml(e.case_node), spec.domain);
  } catch (const std::exception&) {  // unreadable, or not a case of this family: the replay reports it
    return "";
  }
}

}  // namespace

NB_MODULE(_kprop, m) {
  m.doc() = "kprop's runner in process (use the kprop package, not this module)";
  m.def("run", &run, nb::arg("spec"), nb::arg("spec_is_text"), nb::arg("args"));
  m.def("replay", &replay, nb::arg("spec"), nb::arg("spec_is_text"), nb::arg("args"), nb::arg("path"));
  m.def("spec_info", &spec_info, nb::arg("spec"), nb::arg("spec_is_text"), nb::arg("profile") = "",
        nb::arg("max_case_mb") = 0, nb::arg("domain") = "");
  m.def("stored_invariants", &stored_invariants, nb::arg("path"));
  m.def("stored_spec", &stored_spec, nb::arg("path"));
  m.def("stored_found_by", &stored_found_by, nb::arg("path"));
  m.def("stored_case", &stored_case, nb::arg("path"));
  m.def("stored_outside_domain", &stored_outside_domain, nb::arg("spec"), nb::arg("spec_is_text"),
        nb::arg("profile"), nb::arg("domain"), nb::arg("max_case_mb"), nb::arg("path"));
}
