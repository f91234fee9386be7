// Output coverage: each output of an external kernel corrupted in turn, the
// spec run again on the same seed (kprop/coverage.h).
#include "kprop/coverage.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "kprop/external.h"
#include "kprop/output_reads.h"

namespace kprop {
namespace {

using external::Message;
using external::Tensor;
using external::Transport;

// Passes every request on, noting the (op, output) pairs requested.
class Recording final : public Transport {
 public:
  explicit Recording(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}
  std::vector<std::pair<std::string, std::string>> seen;

 protected:
  Message round_trip(const Message& request) override {
    for (const auto& o : request.outputs) {
      const std::pair<std::string, std::string> key{request.op, o.name};
      if (std::find(seen.begin(), seen.end(), key) == seen.end()) seen.push_back(key);
    }
    return inner_->call(request);
  }

 private:
  std::shared_ptr<Transport> inner_;
};

bool is_real(int32_t dtype) {
  return dtype == KPROP_F32 || dtype == KPROP_F64 || dtype == KPROP_F16 || dtype == KPROP_BF16;
}

// One element changed, the middle one: a float scaled by 1.5 and moved by 1
// (a non-finite one made 0), an integer's lowest bit flipped. Small enough
// to stay a plausible value of the output, large enough for any invariant
// that compares the output to see.
Tensor corrupted(const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  if (n == 0) return t;
  const size_t i = n / 2;
  if (is_real(t.dtype)) {
    std::vector<double> v = t.to_doubles();
    v[i] = std::isfinite(v[i]) ? v[i] * 1.5 + 1 : 0;
    return Tensor::of(t.name, t.dtype, t.shape, v);
  }
  std::vector<int64_t> v = t.to_ints();
  v[i] ^= 1;
  return Tensor::of_ints(t.name, t.dtype, t.shape, v);
}

// The inner kernel's replies with one output of one op corrupted.
class Corrupting final : public Transport {
 public:
  Corrupting(std::shared_ptr<Transport> inner, std::string op, std::string output)
      : inner_(std::move(inner)), op_(std::move(op)), output_(std::move(output)) {}

 protected:
  Message round_trip(const Message& request) override {
    Message reply = inner_->call(request);
    if (request.op == op_)
      for (auto& t : reply.tensors)
        if (t.name == output_) t = corrupted(t);
    return reply;
  }

 private:
  std::shared_ptr<Transport> inner_;
  std::string op_, output_;
};

}  // namespace

std::vector<std::string> CoverageReport::undeclared() const {
  std::vector<std::string> out;
  for (const auto& o : outputs)
    for (const auto& name : o.undeclared) out.push_back(o.op + "." + o.output + ": " + name);
  return out;
}

std::vector<std::string> CoverageReport::unchecked() const {
  std::vector<std::string> out;
  for (const auto& o : outputs)
    if (!o.checked()) out.push_back(o.op + "." + o.output);
  return out;
}

void check_coverage_target(const Spec& spec, const RunOptions& options) {
  const std::string target = options.target.empty() ? spec.target : options.target;
  if (!options.target_transport && !external::is_external_target(target))
    throw InputError(
        {}, fmt::format("--output-coverage corrupts the replies of a kernel built elsewhere; '{}' is "
                        "one of the family's own implementations: give --target plugin:PATH or "
                        "exec:COMMAND",
                        target));
}

CoverageReport output_coverage(const Spec& spec, const RunOptions& options) {
  check_coverage_target(spec, options);
  CoverageReport report;
  report.spec = spec.name;
  report.target = options.target.empty() ? spec.target : options.target;
  std::shared_ptr<Transport> kernel = options.target_transport;
  if (!kernel) kernel = resolve_target(spec, report.target, options.case_timeout_s).external;
  if (!kernel) throw InputError({}, fmt::format("--output-coverage: '{}' opened no kernel", report.target));
  report.seed = resolve_seed(spec, options);
  RunOptions o = options;
  o.seed = report.seed;
  o.target = report.target;
  o.write_corpus = false;
  o.listener = nullptr;
  // The baseline: the kernel as it is must pass (and shows which outputs its ops return).
  auto recording = std::make_shared<Recording>(kernel);
  o.target_transport = recording;
  report.baseline = run_spec(spec, o);
  if (report.baseline.status != RunStatus::passed) return report;
  // Each corrupted run needs only a verdict: no shrinking, no replay check,
  // and its findings (failures of replies kprop corrupted itself, which the
  // kernel never gave) stored nowhere the user looks: in a temporary folder,
  // removed when the coverage run ends.
  Spec quick = spec;
  quick.run.shrink_budget_s = 0;
  o.replay_checker.clear();
  o.no_replay_check_reason = "a corrupted reply of --output-coverage";
  struct Scratch {
    std::filesystem::path path;
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } scratch{std::filesystem::temp_directory_path() / fmt::format("kprop-coverage-{}", ::getpid())};
  o.scratch_dir = scratch.path.string();
  for (const auto& [op, output] : recording->seen) {
    if (interrupted()) break;
    o.target_transport = std::make_shared<Corrupting>(kernel, op, output);
    const RunReport r = run_spec(quick, o);
    OutputCoverage c{op, output, {}, {}};
    for (const auto& inv : r.invariants)
      if (inv.status == InvariantStatus::failed) c.caught_by.push_back(inv.name);
    for (const auto& use : spec.invariants) {
      if (std::find(c.caught_by.begin(), c.caught_by.end(), use.name) == c.caught_by.end()) continue;
      const auto reads = invariant_reads(spec, use);
      if (!reads || std::find(reads->begin(), reads->end(), output) == reads->end())
        c.undeclared.push_back(use.name);
    }
    if (r.crash) c.rejected = r.crash->message;
    report.outputs.push_back(std::move(c));
  }
  return report;
}

std::string coverage_text(const CoverageReport& r) {
  std::string out =
      fmt::format("kprop {}: output coverage of target {}, seed {}\n", r.spec, r.target, r.seed);
  if (r.baseline.status != RunStatus::passed) {
    // The detail of a skip already starts with its status ("skipped: ...").
    std::string detail = r.baseline.detail;
    const std::string status = run_status_name(r.baseline.status);
    if (detail.rfind(status + ": ", 0) == 0) detail.erase(0, status.size() + 2);
    // A target that checked nothing here (no device, every case declined)
    // has no coverage to measure: SKIPPED, not a fault to fix.
    if (r.baseline.status == RunStatus::skipped)
      return out + fmt::format("SKIPPED: the target checked nothing here ({}): no coverage to measure\n",
                               detail.empty() ? "skipped" : detail);
    return out + fmt::format("  the target itself does not pass the spec ({}{}): fix that first\n", status,
                             detail.empty() ? "" : ": " + detail);
  }
  size_t width = 6;
  for (const auto& o : r.outputs) width = std::max(width, o.op.size() + 1 + o.output.size());
  out += fmt::format("  {:<{}}  {}\n", "output", width, "a corrupted element is caught by");
  for (const auto& o : r.outputs) {
    std::string by = fmt::format("{}", fmt::join(o.caught_by, ", "));
    if (!o.rejected.empty())
      by += (by.empty() ? "" : "; ") + std::string("the contract's checks: ") + o.rejected;
    out += fmt::format("  {:<{}}  {}\n", o.op + "." + o.output, width, o.checked() ? by : "UNCHECKED");
  }
  for (const auto& u : r.undeclared())
    out += fmt::format(
        "caught by an invariant that does not declare reading it: {} (add it to the invariant's "
        "reads: the static coverage of prop_runner --list would miss it)\n",
        u);
  const auto unchecked = r.unchecked();
  out += unchecked.empty() ? fmt::format("every output of {} is checked ({} output{})\n", r.target,
                                         r.outputs.size(), r.outputs.size() == 1 ? "" : "s")
                           : fmt::format("unchecked outputs: {}\n", fmt::join(unchecked, ", "));
  return out;
}

}  // namespace kprop
