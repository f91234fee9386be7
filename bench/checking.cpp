// What checking and fuzzing cost, in CPU time over a fixed set of cases
// (guards the Trial cache, the fuzz size byte and the decoders):
//
//   checking  every spec × CPU implementation (mutants aside; specs/*.yaml
//             and the declared ops of specs/ops/*.yaml) at its default
//             domain and a large one (attention Nq, Nk <= 256; dflash trees
//             of up to 128 nodes): cases per CPU-second of a whole trial
//             (draw, target, reference, every invariant), and the checking
//             overhead per case — trial minus the target's own run — in
//             units of one run of the fp64 reference on the same case;
//             the target's runs per case (the derived cases' included) and
//             the harness's share: the trial minus all of them, in the
//             same units (what checking costs beyond the kernel under test).
//   fuzz      every spec's harness work per input (decode the bytes, one
//             trial, every invariant, as fuzz/harness.cpp does; here without
//             coverage instrumentation) over a fixed set of inputs:
//             inputs per CPU-second. --full-size puts the size byte 255
//             before every input, which decodes the rest as the decoder did
//             before it had a size byte (every sized draw over its whole
//             range): the cost the size ramp saves.
//
// Deterministic inputs (fixed seeds), CPU time (the machine may be shared):
//   build/bench/bench_checking [--cases N] [--inputs N] [--filter TEXT] [--domain default|large]
//                              [--fuzz-only | --checking-only] [--full-size] [--by-invariant]
//                              [--examples]
// --examples adds specs/examples (the families' invariants as expressions,
// with their metamorphic relations); --filter keeps the specs whose path
// contains TEXT; --domain keeps one of
// the checking rows' domains (what a profile of one row wants);
// --by-invariant adds each invariant's CPU time per case under its row.
// Not a test: nothing here asserts a time.
#include <fmt/format.h>
#include <time.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kprop/allocator.h"
#include "kprop/draw.h"
#include "kprop/rng.h"
#include "kprop/runner.h"

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// A spec with some domain keys replaced (the "large" domains).
kprop::Spec with_domain(const std::string& path,
                        const std::vector<std::pair<std::string, std::string>>& keys) {
  YAML::Node root = YAML::LoadFile(path);
  for (const auto& [key, value] : keys) {
    YAML::Node node = root["domain"];
    std::string rest = key;
    for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1))
      node.reset(node[rest.substr(0, dot)]);
    node[rest] = YAML::Load(value);
  }
  return kprop::parse_spec(YAML::Dump(root), path);
}

// The runner's size ramp (runner.cpp): 0 to max_size over 100 cases.
int size_at(int64_t i, int64_t max_size) {
  return int((i % 100) * max_size / 99);
}

void checking_rows(const kprop::Spec& spec, const std::string& domain_name, int cases, bool by_invariant) {
  const kprop::Family& family = *spec.family;
  const kprop::Impl reference = kprop::resolve_target(spec, spec.reference);
  const auto gen = family.generator(spec.domain);
  std::vector<kprop::AnyCase> drawn;
  rc::Random random(7);
  for (int i = 0; i < cases; ++i) drawn.push_back(gen(random.split(), size_at(i, spec.run.max_size)).value());
  const auto& impls = family.implementations();
  for (size_t t = 0; t < impls.size(); ++t) {
    if (impls[t].kind == kprop::ImplKind::mutant || impls[t].device != "cpu") continue;
    const kprop::Impl target = family.registered(t);
    // all_target_s: every run of the target inside the trials (the case's
    // and the derived cases' of metamorphic relations, tilings and the
    // like), as the Trial times them (wall clock, one thread).
    double trial_s = 0, target_s = 0, reference_s = 0, all_target_s = 0;
    int64_t target_runs = 0;
    // CPU seconds per invariant over the checked cases; what a Trial caches
    // (the target's run, the reference's, the error scales) counts to the
    // first invariant that asks for it.
    std::vector<double> invariant_s(spec.invariants.size());
    std::vector<const kprop::AnyCase*> checked_cases;
    for (const auto& c : drawn) {
      const double t0 = cpu_seconds();
      std::vector<double> own(spec.invariants.size());
      try {
        auto trial = family.begin_trial(c, target, reference);
        // (Timed per invariant only when asked: the process CPU clock is a
        // system call, two per invariant were a sixth of layernorm's trial.)
        for (size_t i = 0; i < spec.invariants.size(); ++i) {
          const double t1 = by_invariant ? cpu_seconds() : 0;
          (void)kprop::check_invariant(*trial, spec.invariants[i]);
          if (by_invariant) own[i] = cpu_seconds() - t1;
        }
        all_target_s += trial->times().target;
        target_runs += trial->times().target_runs;
      } catch (const std::exception&) {
        continue;  // declined (Unsupported): not a checked case
      }
      trial_s += cpu_seconds() - t0;
      for (size_t i = 0; i < own.size(); ++i) invariant_s[i] += own[i];
      checked_cases.push_back(&c);
    }
    // One run of the target, then of the reference, on each checked case,
    // each in a pass of its own: by the time a case comes round again, the
    // families' small caches of recent results (kprop/recent.h: a kvcache
    // sequence's data and outputs, a dflash model) hold other cases, so
    // these are cold runs, what one evaluation costs.
    for (const auto* c : checked_cases) {
      const double t0 = cpu_seconds();
      family.run_once(target, *c);
      target_s += cpu_seconds() - t0;
    }
    for (const auto* c : checked_cases) {
      const double t0 = cpu_seconds();
      family.run_once(reference, *c);
      reference_s += cpu_seconds() - t0;
    }
    const int checked = static_cast<int>(checked_cases.size());
    fmt::print("{:<18} {:<8} {:<16} {:>6} {:>12.0f} {:>10.3f} {:>10.3f} {:>10.1f} {:>8.1f} {:>10.1f}\n",
               spec.name, domain_name, impls[t].name, checked, checked / std::max(trial_s, 1e-9),
               1e3 * trial_s / std::max(checked, 1), 1e3 * reference_s / std::max(checked, 1),
               (trial_s - target_s) / std::max(reference_s, 1e-12),
               double(target_runs) / std::max(checked, 1),
               std::max(0.0, trial_s - all_target_s) / std::max(reference_s, 1e-12));
    if (by_invariant)
      for (size_t i = 0; i < invariant_s.size(); ++i)
        fmt::print("    {:<34} {:>8.3f} ms/case {:>5.1f}%\n", spec.invariants[i].name,
                   1e3 * invariant_s[i] / std::max<size_t>(checked_cases.size(), 1),
                   100 * invariant_s[i] / std::max(trial_s, 1e-12));
  }
}

// Fixed inputs: a size byte spread over 0..255 and 0..511 random bytes.
void fuzz_row(const kprop::Spec& spec, int inputs, bool full_size) {
  kprop::RunOptions options;
  options.crash_guard = false;
  const kprop::RunContext ctx = kprop::make_context(spec, options, 0);
  std::vector<std::vector<uint8_t>> data(static_cast<size_t>(inputs));
  for (int n = 0; n < inputs; ++n) {
    const uint64_t length = kprop::rng::hash(0xf022, 0, uint64_t(n)) % 512;
    if (full_size) data[size_t(n)].push_back(kprop::BytesDraw::kFullSize);
    for (uint64_t b = 0; b < length; ++b)
      data[size_t(n)].push_back(uint8_t(kprop::rng::hash(0xf022, uint64_t(n) + 1, b)));
  }
  const double t0 = cpu_seconds();
  int failures = 0;
  for (const auto& bytes : data) {
    const kprop::AnyCase c = spec.family->from_bytes(bytes.data(), bytes.size(), spec.domain);
    const auto trial = spec.family->begin_trial(c, ctx.target, ctx.reference);
    for (const auto& use : spec.invariants) {
      const kprop::CheckResult r = kprop::check_one(ctx, *trial, use, c);
      if (r.kind == kprop::CheckResult::Kind::declined) break;  // as the harness: no verdict
      failures += r.failed() || r.kind == kprop::CheckResult::Kind::target_failure;
    }
  }
  const double s = cpu_seconds() - t0;
  fmt::print("{:<18} {:>7} {:>10.0f} {:>10.2f}{}\n", spec.name, inputs, inputs / std::max(s, 1e-9), s,
             failures ? fmt::format("  ({} failing checks or target failures)", failures) : "");
}

}  // namespace

int main(int argc, char** argv) {
  kprop::tune_allocator();  // as prop_runner
  int cases = 200, inputs = 2000;
  std::string filter, domain;
  bool checking = true, fuzz = true, full_size = false, by_invariant = false, examples = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cases" && i + 1 < argc)
      cases = std::atoi(argv[++i]);
    else if (a == "--inputs" && i + 1 < argc)
      inputs = std::atoi(argv[++i]);
    else if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else if (a == "--domain" && i + 1 < argc &&
             (std::strcmp(argv[i + 1], "default") == 0 || std::strcmp(argv[i + 1], "large") == 0))
      domain = argv[++i];
    else if (a == "--fuzz-only")
      checking = false;
    else if (a == "--checking-only")
      fuzz = false;
    else if (a == "--full-size")
      full_size = true;
    else if (a == "--by-invariant")
      by_invariant = true;
    else if (a == "--examples")
      examples = true;
    else {
      fmt::print(stderr,
                 "usage: bench_checking [--cases N] [--inputs N] [--filter TEXT] [--domain default|large] "
                 "[--fuzz-only | --checking-only] [--full-size] [--by-invariant] [--examples]\n");
      return 2;
    }
  }
  std::vector<std::filesystem::path> paths;
  // The families' specs, then the ops declared in YAML (specs/ops: there
  // the target and the reference are the expression evaluator, so checking
  // is all harness).
  std::vector<std::string> dirs = {"specs", "specs/ops"};
  if (examples) dirs.push_back("specs/examples");
  for (const std::string& dir : dirs)
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(KPROP_SOURCE_DIR) / dir))
      if (e.path().extension() == ".yaml" && e.path().string().find(filter) != std::string::npos)
        paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  try {
    if (checking) {
      fmt::print("{:<18} {:<8} {:<16} {:>6} {:>12} {:>10} {:>10} {:>10} {:>8} {:>10}\n", "spec", "domain",
                 "target", "cases", "cases/cpu-s", "ms/case", "ref ms", "overhead", "runs", "harness");
      for (const auto& path : paths) {
        const kprop::Spec spec = kprop::load_spec(path.string());
        if (domain != "large") checking_rows(spec, "default", cases, by_invariant);
        const std::string family = spec.family->name();
        if (domain == "default")
          continue;
        else if (family.rfind("attention.", 0) == 0)
          checking_rows(with_domain(path.string(), {{"nq", "[1, 256]"}, {"nk", "[1, 256]"}}), "large",
                        std::max(1, cases / 4), by_invariant);
        else if (family == "dflash")
          checking_rows(with_domain(path.string(), {{"tree.nodes", "[1, 128]"}}), "large", cases,
                        by_invariant);
      }
      fmt::print(
          "(overhead: CPU time of the trial minus the target's run, per run of the fp64 reference; runs: "
          "the target's runs per case, the derived cases' of metamorphic relations and tilings "
          "included; harness: the trial minus all those runs, per run of the fp64 reference)\n\n");
    }
    if (fuzz) {
      fmt::print("{:<18} {:>7} {:>10} {:>10}\n", "harness", "inputs", "inputs/s", "cpu s");
      for (const auto& path : paths) fuzz_row(kprop::load_spec(path.string()), inputs, full_size);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_checking: {}\n", e.what());
    return 2;
  }
  return 0;
}
