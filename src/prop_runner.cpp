// prop_runner: the command-line front end. The flag table below is the whole
// CLI contract (README, "Using prop_runner"); exit codes (docs/DESIGN.md, "A run"):
// 0 held or skipped, 1 an invariant failed, 2 usage/spec/corpus error or a failed
// health check, 3 the target crashed or an internal error, 130 interrupted.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "kprop/allocator.h"
#include "kprop/coverage.h"
#include "kprop/fuzz_driver.h"
#include "kprop/jobs.h"
#include "kprop/listing.h"
#include "kprop/report.h"
#include "kprop/runner.h"

namespace fs = std::filesystem;
using namespace kprop;

namespace {

struct Config {
  std::vector<std::string> specs;  // several only with --fuzz
  std::string profile;             // the specs' profile (docs/SPEC.md "Profiles")
  std::string domain;              // --domain: domain keys overridden for this run (YAML map)
  std::string target;
  std::string reference;
  std::string seed;  // parsed by parse_seed
  std::optional<int64_t> trials;
  std::optional<double> time;
  std::optional<double> case_timeout;
  int64_t max_case_mb = 0;    // --max-case-mb (0: the spec's)
  bool search = false;        // --search[=false]
  bool search_given = false;  // --search was given, true or false
  std::optional<int64_t> search_trials;
  std::optional<double> search_time;
  // --search, or a search budget (which implies it).
  bool search_asked() const { return search || search_trials.has_value() || search_time.has_value(); }
  std::vector<std::string> invariants;
  std::vector<std::string> suppress_health_check;  // added to the spec's run.suppress_health_check
  bool padded_tensors = false;                     // --padded-tensors: the spec's run.padded_tensors on
  int skipped_exit = 0;                            // --skipped-exit: a run that checked nothing
  std::string format = "text";
  std::string out;
  std::string corpus;
  bool no_corpus = false;
  std::optional<bool> isolate;
  bool mutants = false;
  bool stats = false;
  bool output_coverage = false;
  bool no_replay_check = false;
  bool no_focus = false;
  bool fail_fast = false;
  std::string replay;
  bool list = false;
  bool fuzz = false;
  std::optional<int> jobs;
  std::string work;  // --fuzz's work folder; empty: .fuzz-work
  std::string fuzzer_dir;
  std::vector<std::string> imports;
  std::string fuzz_seeds;
  std::string shard;
  std::string self;  // argv[0], to find the fuzz harnesses beside this binary
};

// A whole decimal number, nothing before or after it (from_chars takes no
// sign, space or 0x, and reads 010 as ten), at most `max`; nullopt otherwise.
std::optional<uint64_t> decimal(const std::string& text, uint64_t max) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v > max) return std::nullopt;
  return v;
}

// "I/N" with 0 <= I < N.
std::pair<int64_t, int64_t> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  if (slash != std::string::npos) {
    const auto i = decimal(text.substr(0, slash), 1u << 30), n = decimal(text.substr(slash + 1), 1u << 30);
    if (i && n && *n >= 1 && *i < *n) return {int64_t(*i), int64_t(*n)};
  }
  throw InputError({}, "--shard " + text + ": expected I/N with 0 <= I < N, e.g. 0/4");
}

// The spec's own bound on run.seed, so that any seed given here can be
// written into a spec (a fresh seed is below 2^53).
constexpr uint64_t kMaxSeed = 9200000000000000000ULL;
std::optional<uint64_t> parse_seed(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (const auto v = decimal(text, kMaxSeed)) return v;
  throw InputError(
      {}, fmt::format("--seed {}: expected a decimal integer in [0, {}] (0: a fresh seed)", text, kMaxSeed));
}

// A number flag's check: CLI11's PositiveNumber names its range with three
// hundred digits; this says what the flag takes.
// `whole`: an integer option; its text is rewritten as the integer (1e6 ->
// 1000000) for CLI11's conversion, which reads no exponent.
CLI::Validator number_in(double lo, bool lo_open, double hi, const std::string& what, bool whole = false) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        const char* end = text.data() + text.size();
        const auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || p != end || !std::isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi ||
            (whole && v != std::floor(v)))
          return fmt::format("'{}' is not {}", text, what);
        if (whole) text = fmt::format("{}", static_cast<int64_t>(v));
        return "";
      },
      what);
}

// Refuses, rather than drops, a flag the mode does not use (`uses`: the
// flags it does, named as below): `mode` takes no X, with `why`. --spec,
// --profile and --domain are every mode's; --format is each mode's own check.
void refuse_unused(const Config& cfg, const char* mode, std::initializer_list<std::string_view> uses,
                   const char* why) {
  const std::pair<bool, const char*> given[] = {
      {!cfg.target.empty(), "--target"},
      {!cfg.reference.empty(), "--reference"},
      {!cfg.seed.empty(), "--seed"},
      {cfg.trials.has_value(), "--trials"},
      {cfg.time.has_value(), "--time"},
      {cfg.case_timeout.has_value(), "--case-timeout"},
      {cfg.search_asked(), "--search"},
      {!cfg.invariants.empty(), "--invariant"},
      {!cfg.suppress_health_check.empty(), "--suppress-health-check"},
      {cfg.padded_tensors, "--padded-tensors"},
      {!cfg.out.empty(), "--out"},
      {!cfg.corpus.empty() || cfg.no_corpus, "--corpus/--no-corpus"},
      {cfg.isolate.has_value(), "--isolate"},
      {cfg.mutants, "--mutants"},
      {cfg.stats, "--stats"},
      {cfg.output_coverage, "--output-coverage"},
      {cfg.no_replay_check, "--no-replay-check"},
      {cfg.fail_fast, "--fail-fast"},
      {cfg.no_focus, "--no-focus"},
      {!cfg.replay.empty(), "--replay"},
      {cfg.fuzz, "--fuzz"},
      {cfg.jobs.has_value(), "--jobs"},
      {!cfg.imports.empty(), "--import"},
      {!cfg.fuzz_seeds.empty(), "--fuzz-seeds"},
      {!cfg.shard.empty(), "--shard"},
      {!cfg.work.empty(), "--work"},
      {!cfg.fuzzer_dir.empty(), "--fuzzer-dir"},
      {cfg.skipped_exit != 0, "--skipped-exit"}};
  for (const auto& [on, flag] : given)
    if (on && std::find(uses.begin(), uses.end(), flag) == uses.end())
      throw InputError({}, fmt::format("{} takes no {}: {}", mode, flag, why));
}

// The flags that set the spec's run: settings for this run:
// --suppress-health-check (added to run.suppress_health_check) and
// --padded-tensors (run.padded_tensors).
void apply_run_flags(Spec& spec, const Config& cfg) {
  for (const auto& check : cfg.suppress_health_check)
    if (std::find(spec.run.suppress_health_check.begin(), spec.run.suppress_health_check.end(), check) ==
        spec.run.suppress_health_check.end())
      spec.run.suppress_health_check.push_back(check);
  if (!cfg.padded_tensors) return;
  const auto padded = [](Spec& s) {
    if (!s.run.padded_tensors) s.run.padded_tensors = true, s.padded_tensors_override = true;
  };
  padded(spec);
  // A mutant listed under a profile runs under that profile's spec
  // (--mutants): padded as well, each such spec once.
  std::map<const Spec*, std::shared_ptr<const Spec>> copies;
  for (auto& [name, profiled] : spec.mutant_profiles) {
    auto& copy = copies[profiled.get()];
    if (!copy) {
      auto s = std::make_shared<Spec>(*profiled);
      padded(*s);
      copy = s;
    }
    profiled = copy;
  }
}

int run_fuzz_mode(const Config& cfg, const std::string& corpus_root) {
  // Of the health checks, --fuzz has the declined one only (its seed run's).
  for (const auto& check : cfg.suppress_health_check)
    if (check != "declined")
      throw InputError({}, fmt::format("--fuzz takes --suppress-health-check declined only, not {}: a fuzz "
                                       "run has no {} health check",
                                       check, check));
  std::vector<Spec> specs;
  for (const auto& path : cfg.specs) {
    specs.push_back(load_spec(path, cfg.profile, cfg.domain, cfg.max_case_mb));
    apply_run_flags(specs.back(), cfg);
  }
  FuzzOptions o;
  o.target = cfg.target;
  for (const auto& spec : specs)
    if (!o.target.empty()) resolve_target(spec, o.target);
  o.time_s = cfg.time.value_or(60);
  o.jobs = cfg.jobs.value_or(1);
  // Fresh unless --seed S (S > 0) fixes it: fuzzing explores; the spec's
  // run.seed is its property runs'. Printed first, as a property run's.
  const auto seed = parse_seed(cfg.seed);
  o.seed = seed.value_or(0) != 0 ? *seed : fresh_seed();
  fmt::print(stderr, "kprop fuzz: seed {}\n", o.seed);
  o.work_dir = cfg.work.empty() ? ".fuzz-work" : cfg.work;
  // Beside the binary itself: argv[0] of a prop_runner found on PATH (or
  // through a link) named a fuzz/ under the current folder.
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  o.fuzzer_dir = !cfg.fuzzer_dir.empty() ? cfg.fuzzer_dir
                                         : ((ec ? fs::path(cfg.self) : self).parent_path() / "fuzz").string();
  o.corpus_root = corpus_root;
  o.write_corpus = !cfg.no_corpus;
  o.case_timeout_s = cfg.case_timeout;
  o.replay_program = cfg.self;
  const FuzzReport report = run_fuzz(specs, o);
  fmt::print("kprop fuzz: {} spec(s), {} new finding(s){}\n", specs.size(), report.new_findings(),
             report.interrupted ? " (interrupted)" : "");
  for (const auto& s : report.stats)
    if (!s.skipped.empty())
      fmt::print("  {:<16} SKIPPED: {}\n", s.spec, s.skipped);
    else
      fmt::print("  {:<16} {:>8.0f} s  {:>12} execs  {:>9.0f} exec/s  cov {}  crash inputs {}\n", s.spec,
                 s.seconds, s.executions, s.executions / std::max(s.seconds, 1e-9), s.coverage,
                 s.crash_inputs);
  // Known findings, one line per stored case they reproduced (a count
  // alone left the user without the file or how to replay it).
  int known = 0;
  std::vector<std::pair<const FuzzFinding*, int>> known_files;
  for (const auto& f : report.findings) {
    if (!f.is_new) {
      ++known;
      auto same = std::find_if(known_files.begin(), known_files.end(),
                               [&](const auto& k) { return k.first->corpus_path == f.corpus_path; });
      if (same == known_files.end())
        known_files.push_back({&f, 1});
      else
        ++same->second;
      continue;
    }
    fmt::print("  NEW {}: {} ({}){}\n", f.spec, f.invariant, f.summary,
               f.corpus_path.empty() ? "" : " -> " + f.corpus_path);
  }
  if (known) {
    // Stored before them: in this run, or by an earlier one (in the corpus,
    // or with --no-corpus in the findings folder); each line names the file.
    fmt::print("  {} more crash input(s) reproduced findings already stored:\n", known);
    for (const auto& [f, inputs] : known_files)
      fmt::print("    {}: {} ({}), {} input(s){}{}\n", f->spec, f->invariant, f->summary, inputs,
                 f->corpus_path.empty() ? "" : " -> " + f->corpus_path,
                 f->replay.empty() ? "" : "; replay: " + f->replay);
  }
  // A crash the harness saw that no re-check reproduces is still a crash:
  // never a clean run (as a property run's finding whose replay does not
  // fail again is still a failure, with a warning).
  size_t unreproduced = 0;
  for (const auto& s : report.stats)
    for (const auto& path : s.unreproduced) {
      ++unreproduced;
      const bool leak = fs::path(path).filename().string().rfind("leak-", 0) == 0;
      fmt::print(
          "  UNREPRODUCED {}: the harness failed on {}, a re-check of it alone passes: {}; run the "
          "harness on the file\n",
          s.spec, path,
          leak ? "a memory leak, which only the harness's sanitizer reports"
               : "the failure depends on more than the input (state kept between inputs, a race, "
                 "uninitialised memory, or a sanitizer only the harness has)");
    }
  for (const auto& s : report.stats)
    if (!s.health.empty()) fmt::print("  HEALTH CHECK {}: declined: {}\n", s.spec, s.health);
  if (report.interrupted) return 130;  // as a property run: never a green exit for a run cut short
  if (report.all_skipped()) fmt::print("SKIPPED: nothing was fuzzed (the target checked no seed input)\n");
  if (report.new_findings() > 0 || unreproduced > 0) return 1;
  // As a property run: a target that declines most of what it is given
  // checked too little for a clean run to mean anything.
  if (report.health_failed()) {
    fmt::print("HEALTH CHECK FAILED (declined): the target declined most of the seed inputs\n");
    return 2;
  }
  return report.all_skipped() ? cfg.skipped_exit : 0;
}

// corpus/ beside the spec's specs/ folder (specs/x.yaml and specs/ops/x.yaml
// -> corpus/), so the run stores counterexamples in the repository wherever
// it is started from; a spec under no specs/ folder: corpus/ here.
std::string default_corpus_dir(const std::string& spec_path) {
  const fs::path file = fs::absolute(spec_path).lexically_normal();
  for (fs::path dir = file.parent_path(); dir.has_relative_path(); dir = dir.parent_path())
    if (dir.filename() == "specs")
      return (dir.parent_path() / "corpus").lexically_relative(fs::current_path()).string();
  return "corpus";
}

// That `path` can be written (its folder made, a file created in it), with
// nothing left behind: the folders this check makes are removed again (the
// report makes them when it is written), and the file is untouched until then.
void check_writable(const std::string& flag, const std::string& path) {
  const fs::path target(path), dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const auto fail = [&](const std::string& why) { throw InputError({}, flag + " " + path + ": " + why); };
  std::error_code ec;
  if (fs::is_directory(target, ec)) fail("is a folder");
  if (fs::exists(target, ec) && !fs::is_regular_file(target, ec))
    fail("is not a regular file (the report replaces the file at the path)");
  std::vector<fs::path> made;  // deepest first
  for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) made.push_back(p);
  const auto unmake = [&] {
    std::error_code ignore;
    for (const auto& p : made) fs::remove(p, ignore);
  };
  fs::create_directories(dir, ec);
  if (ec) {
    const std::string why = ec.message();
    unmake();
    fail("cannot create its folder: " + why);
  }
  const fs::path probe = dir / fmt::format(".{}.probe-{}", target.filename().string(), getpid());
  const bool writable = static_cast<bool>(std::ofstream(probe));
  fs::remove(probe, ec);
  unmake();
  if (!writable) fail("cannot write in its folder");
}

// --out once it is known to be a path the report may replace, holding an
// earlier report: an error after that (exit 2, 3) leaves the format's error
// report there, not the earlier one read as this run's.
struct ArmedOut {
  std::string path;
  std::shared_ptr<const Reporter> reporter;
};
std::optional<ArmedOut> g_armed_out;

void write_error_report(const std::string& message, int code) {
  if (!g_armed_out) return;
  try {
    write_file_atomic(g_armed_out->path, g_armed_out->reporter->error(message, code));
    fmt::print(stderr, "prop_runner: --out {} says the error (no report)\n", g_armed_out->path);
  } catch (const std::exception& e) {
    fmt::print(stderr, "prop_runner: --out {}: {}\n", g_armed_out->path, e.what());
  }
}

int run(const Config& cfg) {
  if (cfg.list) {
    if (cfg.format != "text" && cfg.format != "json")
      throw InputError({}, "--list --format " + cfg.format + ": valid: text, json");
    if (cfg.specs.size() > 1) throw InputError({}, "--list takes one --spec");
    // It lists (stdout): what only runs take is refused, not dropped (an
    // --out never written, an invalid --shard passing with exit 0).
    refuse_unused(cfg, "--list", {}, "it lists and runs nothing");
    std::optional<Spec> spec;
    if (!cfg.specs.empty()) spec = load_spec(cfg.specs[0], cfg.profile, cfg.domain, cfg.max_case_mb);
    const Spec* s = spec ? &*spec : nullptr;
    std::cout << (cfg.format == "json" ? list_json(s) : list_text(s));
    return 0;
  }
  // The fuzz modes print their own text and check every invariant of the
  // spec against one target: what they do not use is refused, not dropped
  // (a --out FILE never written, --mutants or --replay silently not done).
  if (cfg.format != "text" && (cfg.fuzz || !cfg.imports.empty() || !cfg.fuzz_seeds.empty()))
    throw InputError({}, fmt::format("{} takes no --format: it reports as text on stdout",
                                     cfg.fuzz               ? "--fuzz"
                                     : !cfg.imports.empty() ? "--import"
                                                            : "--fuzz-seeds"));
  if (cfg.fuzz)
    refuse_unused(cfg, "--fuzz",
                  {"--fuzz", "--target", "--seed", "--time", "--case-timeout", "--corpus/--no-corpus",
                   "--jobs", "--work", "--fuzzer-dir", "--skipped-exit", "--suppress-health-check"},
                  "it fuzzes one target with the spec's harness, checking every invariant");
  else if (!cfg.imports.empty())
    refuse_unused(cfg, "--import",
                  {"--import", "--target", "--case-timeout", "--corpus/--no-corpus", "--skipped-exit",
                   "--padded-tensors"},
                  "it checks the inputs against one target, every invariant of the spec");
  else if (!cfg.fuzz_seeds.empty())
    refuse_unused(cfg, "--fuzz-seeds", {"--fuzz-seeds", "--seed"},
                  "it writes the harness's seed inputs and runs nothing");
  // The fuzz folders are --fuzz's own.
  if (!cfg.fuzz && !cfg.list && cfg.imports.empty() && cfg.fuzz_seeds.empty() &&
      (!cfg.work.empty() || !cfg.fuzzer_dir.empty()))
    throw InputError({},
                     fmt::format("{} applies to --fuzz only", cfg.work.empty() ? "--fuzzer-dir" : "--work"));
  auto reporter = make_reporter(cfg.format, cfg.stats);
  if (!reporter) throw InputError({}, "--format " + cfg.format + ": valid: " + join(reporter_names()));
  // --out is written at the end: a path it cannot be written to is said now,
  // not after the run (whose report it would lose).
  if (!cfg.out.empty()) {
    // The report replaces the file at the path: never a spec or corpus file the run reads.
    std::error_code ec;
    for (const auto& read : cfg.specs)
      if (fs::equivalent(cfg.out, read, ec))
        throw InputError({},
                         fmt::format("--out {} is the spec {}: the report would replace it", cfg.out, read));
    if (!cfg.replay.empty() && fs::equivalent(cfg.out, cfg.replay, ec))
      throw InputError({}, fmt::format("--out {} is the file --replay reads", cfg.out));
    // Nor a file in the folder it replays (the report would replace a
    // stored case before it is read, and be read as one the next time).
    if (!cfg.replay.empty() && fs::is_directory(cfg.replay)) {
      const fs::path folder = fs::weakly_canonical(cfg.replay, ec), out = fs::weakly_canonical(cfg.out, ec);
      const auto [end, rest] = std::mismatch(folder.begin(), folder.end(), out.begin(), out.end());
      if (end == folder.end())
        throw InputError(
            {}, fmt::format("--out {} is inside the folder --replay reads ({})", cfg.out, cfg.replay));
    }
    check_writable("--out", cfg.out);
    // A report already there (an earlier run's) is replaced at once, until
    // this run's replaces it: a run that dies (a crash the crash guard
    // reports, a kill) or ends in an error leaves that, not the last run's
    // verdict. A new path is written only by the report (an error leaves
    // no file, and no folder it needed).
    if (fs::exists(cfg.out)) g_armed_out = ArmedOut{cfg.out, make_reporter(cfg.format, cfg.stats)};
    if (g_armed_out)
      write_file_atomic(cfg.out,
                        g_armed_out->reporter->error(
                            "the run did not finish: it stopped before its report (a crash or a kill)", 3));
  }
  // (After --out is armed: an error here replaces an earlier report.)
  // A replay checks stored cases, each with the seed its file records: what
  // draws cases is refused, not dropped.
  if (!cfg.replay.empty()) {
    const std::pair<bool, const char*> drawing[] = {{!cfg.seed.empty(), "--seed"},
                                                    {cfg.trials.has_value(), "--trials"},
                                                    {cfg.time.has_value(), "--time"},
                                                    {cfg.search_asked(), "--search"},
                                                    {!cfg.shard.empty(), "--shard"}};
    for (const auto& [given, flag] : drawing)
      if (given) throw InputError({}, fmt::format("--replay takes no {}: it checks the stored cases", flag));
  }
  for (size_t i = 0; i < cfg.invariants.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (cfg.invariants[i] == cfg.invariants[j])
        throw InputError({}, "--invariant " + cfg.invariants[i] + " is given twice");
  const std::string corpus_root = cfg.corpus.empty() ? default_corpus_dir(cfg.specs[0]) : cfg.corpus;
  install_interrupt_handler();
  if (cfg.output_coverage && cfg.format != "text")
    throw InputError({}, "--output-coverage reports as text only (--format text)");
  if (cfg.fuzz) return run_fuzz_mode(cfg, corpus_root);
  if (cfg.specs.size() > 1) throw InputError({}, "several --spec are only accepted with --fuzz");
  Spec spec = load_spec(cfg.specs[0], cfg.profile, cfg.domain, cfg.max_case_mb);
  apply_run_flags(spec, cfg);
  if (!cfg.fuzz_seeds.empty()) {
    const auto seed = parse_seed(cfg.seed);
    // Seed 0 means a fresh seed elsewhere; seed inputs are for a corpus, drawn reproducibly.
    if (seed && *seed == 0)
      throw InputError({},
                       "--fuzz-seeds --seed 0: give a seed S > 0 (without --seed, the fixed default inputs)");
    const int n = write_fuzz_seeds(spec, cfg.fuzz_seeds, 64, seed);
    fmt::print("kprop: wrote {} seed inputs for {} to {} ({})\n", n, spec.name, cfg.fuzz_seeds,
               seed ? fmt::format("seed {}", *seed)
                    : std::string("the fixed default inputs; --seed S draws others"));
    return n > 0 ? 0 : 2;
  }
  if (!cfg.imports.empty()) {
    const Impl target = resolve_target(spec, cfg.target.empty() ? spec.target : cfg.target, cfg.case_timeout);
    // Every path first: a bad one is an error before anything is stored.
    for (const auto& path : cfg.imports) check_fuzz_input(path);
    int found = 0, passing = 0, skipped = 0;
    FuzzSeen seen;  // one bug's inputs dedupe within this import (and outside a corpus)
    for (const auto& path : cfg.imports) {
      const FuzzImport imported = import_fuzz_input(spec, target, path, corpus_root, !cfg.no_corpus,
                                                    cfg.case_timeout, cfg.self, &seen);
      const auto& f = imported.finding;
      if (!f) {
        if (imported.checked > 0)
          ++passing, fmt::print("  passes  {}\n", path);
        else
          ++skipped, fmt::print("  skip    {} (not checked: {})\n", path, imported.not_checked);
        continue;
      }
      ++found;
      fmt::print("  {} {}: {}: {}\n    shrunk: {}{}{}{}\n", f->is_new ? "NEW  " : "known", path, f->what(),
                 f->message, f->summary, f->corpus_path.empty() ? "" : "\n    stored: " + f->corpus_path,
                 f->store_note.empty() ? "" : "\n    note: " + f->store_note,
                 f->replay.empty() ? "" : "\n    replay: " + f->replay);
    }
    // The verdict line, as a run's: an import that checked nothing is said
    // SKIPPED (exit 0 as every skip, or --skipped-exit; never PASSED).
    const int n = static_cast<int>(cfg.imports.size());
    if (found > 0)
      fmt::print("FAILED: {} of {} input(s) fail ({} pass, {} not checked)\n", found, n, passing, skipped);
    else if (passing > 0)
      fmt::print("PASSED: {} of {} input(s) checked and pass ({} not checked)\n", passing, n, skipped);
    else
      fmt::print("SKIPPED: none of the {} input(s) was checked\n", n);
    return found > 0 ? 1 : passing > 0 ? 0 : cfg.skipped_exit;
  }

  RunOptions options;
  options.target = cfg.target;
  options.reference = cfg.reference;
  options.seed = parse_seed(cfg.seed);
  options.trials = cfg.trials;
  options.time_budget_s = cfg.time;
  options.case_timeout_s = cfg.case_timeout;
  // --search=false with a budget that implies --search: which one was meant?
  if (cfg.search_given && !cfg.search && (cfg.search_trials || cfg.search_time))
    throw InputError({}, fmt::format("--search=false contradicts {}, which implies --search",
                                     cfg.search_trials ? "--search-trials" : "--search-time"));
  // --search=false turns off a spec's run.search.enabled: true.
  if (cfg.search_asked())
    options.search = true;
  else if (cfg.search_given)
    options.search = false;
  options.search_trials = cfg.search_trials;
  options.search_time_budget_s = cfg.search_time;
  options.only_invariants = cfg.invariants;
  options.corpus_dir = corpus_root;
  // --mutants finds known bugs: their cases go to the scratch folder unless
  // --corpus asks for them.
  options.write_corpus = !cfg.no_corpus && (!cfg.mutants || !cfg.corpus.empty());
  // Mutants are known-broken code: each case runs in a forked child by default.
  options.isolate = cfg.isolate.value_or(cfg.mutants);
  // The kill matrix (--stats, the HTML report) needs every invariant tried on every mutant.
  options.kill_matrix = cfg.mutants && (cfg.stats || cfg.format == "html");
  // --fail-fast: the first counterexample ends the run, as it ends a mutant's.
  options.stop_on_first_failure = cfg.fail_fast;
  options.focus = !cfg.no_focus;
  const auto progress = make_progress_line();
  if (cfg.format == "text" && cfg.out.empty()) options.listener = progress.get();
  if (!cfg.shard.empty()) std::tie(options.shard_index, options.shard_count) = parse_shard(cfg.shard);
  // Shards split one case sequence: a fresh seed in each shard's process
  // drew unrelated sequences, and the shards together checked neither the
  // unsharded run's cases nor all of any run's.
  if (options.shard_count > 1 && fresh_seed_wanted(spec, options))
    throw InputError({},
                     fmt::format("--shard {}: the shards must draw the same cases, so they need one fixed "
                                 "seed: pass the same --seed S to every shard ({})",
                                 cfg.shard,
                                 options.seed ? "--seed 0 asks for a fresh seed each run"
                                              : "the spec's run.seed is 0, a fresh seed each run"));
  if (cfg.jobs) {
    options.jobs = *cfg.jobs;
  } else {
    // The largest case of the run: --mutants runs some mutants under their profiles.
    double largest = largest_case(spec).bytes;
    if (cfg.mutants)
      for (const auto& [name, own] : spec.mutant_profiles)
        largest = std::max(largest, largest_case(*own).bytes);
    std::string why;
    options.jobs = default_jobs(largest, &why);
    if (!why.empty()) fmt::print(stderr, "kprop: {}\n", why);
  }
  options.replay_program = cfg.self;
  // Each finding's replay is re-run by this binary in a fresh process; of
  // the mutant table's (planted bugs, which it reports as kills) only those
  // it stores in the corpus.
  if (!cfg.no_replay_check) {
    std::error_code ec;
    const fs::path self = fs::canonical("/proc/self/exe", ec);
    options.replay_checker = ec ? cfg.self : self.string();
    options.replay_check_corpus_only = cfg.mutants;
  } else {
    options.no_replay_check_reason = "--no-replay-check";
  }

  std::string text, formatted;
  int code = 0;
  const auto text_reporter = make_reporter("text", cfg.stats);
  if (!cfg.replay.empty()) {
    const auto rows = replay_corpus(spec, cfg.replay, options);
    // Unreadable files are reported and the rest replayed (exit 2 unless
    // something worse); a folder with no files, or none checked, is skipped.
    code = interrupted()                                    ? 130
           : replay_verdict(rows) == ReplayVerdict::skipped ? cfg.skipped_exit
                                                            : exit_code(replay_verdict(rows));
    // Bad input says so on stderr too, one line a file (the report lists them with the rest).
    for (const auto& row : rows)
      if (!row.error.empty()) fmt::print(stderr, "prop_runner: error: {}\n", row.error);
    text = text_reporter->replay(spec, rows);
    formatted = reporter->replay(spec, rows);
  } else {
    check_run_names(spec, options);  // a misspelt name: one line, no header
    // So are a run that cannot start and its flags'.
    if (cfg.mutants) {
      bool any = false;
      for (const auto& impl : spec.family->implementations()) any = any || impl.kind == ImplKind::mutant;
      if (!any)  // "0 of 0 mutants killed" is no pass
        throw InputError({spec.path, 0, 0},
                         fmt::format("--mutants: family {} of spec {} has no mutants to run",
                                     spec.family->name(), spec.name));
    }
    if (cfg.output_coverage) check_coverage_target(spec, options);
    options.seed = resolve_seed(spec, options);  // printed first: a run that dies still names its seed
    fmt::print(
        stderr, "kprop: spec {} seed {}{}{}{}{}\n", spec.name, *options.seed,
        spec.profile.empty() ? "" : " profile " + spec.profile,
        options.shard_count > 1 ? fmt::format(" shard {}/{}", options.shard_index, options.shard_count) : "",
        spec.domain_overrides.empty() ? "" : " domain " + spec.domain_overrides,
        options.isolate ? " isolated" : "");
    if (cfg.output_coverage) {
      const CoverageReport report = output_coverage(spec, options);
      text = formatted = coverage_text(report);
      code = report.baseline.status == RunStatus::skipped                ? cfg.skipped_exit
             : report.baseline.status != RunStatus::passed               ? 2
             : report.unchecked().empty() && report.undeclared().empty() ? 0
                                                                         : 1;
    } else if (cfg.mutants) {
      const auto rows = run_mutants(spec, options);
      code = mutants_skipped(rows) ? cfg.skipped_exit : mutants_exit_code(rows);
      text = text_reporter->mutants(spec, rows);
      formatted = reporter->mutants(spec, rows);
    } else {
      const RunReport report = run_spec(spec, options);
      code = report.status == RunStatus::skipped ? cfg.skipped_exit : exit_code(report.status);
      text = text_reporter->run(report);
      formatted = reporter->run(report);
      // A mutant that only a profile's sizes reach passes elsewhere: that
      // PASSED is no sign the spec misses it.
      const std::string target = options.target.empty() ? spec.target : options.target;
      if (const auto own = spec.mutant_profiles.find(target); report.status == RunStatus::passed &&
                                                              own != spec.mutant_profiles.end() &&
                                                              own->second->profile != spec.profile) {
        const std::string note = fmt::format(
            "note: {} is a mutant that only profile {}'s cases reach (--mutants runs it there): "
            "--profile {}\n",
            target, own->second->profile, own->second->profile);
        text += note;
        if (cfg.format == "text") formatted += note;
      }
    }
  }
  // --skipped-exit changes the exit code of a skip: the JSON report says the
  // code this run exits with (its reporter knows only the status).
  if (cfg.format == "json" && cfg.skipped_exit != 0) {
    nlohmann::json j = nlohmann::json::parse(formatted, nullptr, false);
    if (j.is_object() && j.contains("exit_code") && j["exit_code"] != code) {
      j["exit_code"] = code;
      formatted = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
  }
  if (!cfg.out.empty()) {
    // The summary first: a report that cannot be written (a full disk) loses
    // the file, not the verdict and its replay commands.
    std::cout << text;
    std::cout.flush();
    write_file_atomic(cfg.out, formatted);
  } else {
    std::cout << formatted;
  }
  std::cout.flush();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  tune_allocator();
  CLI::App app{"kprop property runner: checks a kernel against a YAML spec", "prop_runner"};
#if KPROP_HAVE_CUDA
  app.set_version_flag("--version", "prop_runner (kprop) " KPROP_VERSION ", CUDA targets compiled in");
#else
  app.set_version_flag("--version", "prop_runner (kprop) " KPROP_VERSION ", built without CUDA");
#endif
  Config cfg;
  // An existing file, or a spec's old name whose new file exists (load_spec
  // loads that, with a note): CLI::ExistingFile refused the old names.
  const CLI::Validator spec_file(
      [](std::string& path) -> std::string {
        if (fs::is_regular_file(path) || !renamed_spec_file(path).empty()) return "";
        return fs::exists(path) ? "not a file: " + path : "File does not exist: " + path;
      },
      "FILE");
  app.add_option("--spec", cfg.specs, "spec file (specs/*.yaml); repeatable with --fuzz")->check(spec_file);
  app.add_option("--profile", cfg.profile,
                 "apply the spec's profile NAME (its profiles: domain/run overrides; e.g. gpu)")
      ->check(
          CLI::Validator([](std::string& name) { return name.empty() ? "names no profile" : ""; }, "NAME"));
  app.add_option("--domain", cfg.domain,
                 "override domain keys for this run, a YAML map applied after --profile: e.g. "
                 "--domain '{dtypes: [f32]}' for a kernel that takes f32 only (a declared op: dtypes and "
                 "its dims)")
      ->check(CLI::Validator([](std::string& map) { return map.empty() ? "overrides nothing" : ""; }, "MAP"));
  // An empty name would silently mean the spec's default.
  const auto named = [](const char* what) {
    return CLI::Validator([what](std::string& name) { return name.empty() ? std::string(what) : ""; },
                          "NAME");
  };
  auto* target =
      app.add_option("--target", cfg.target, "implementation under test (default: the spec's target)")
          ->check(named("names no implementation (leave --target out for the spec's target)"));
  app.add_option("--reference", cfg.reference,
                 "oracle of the comparative invariants (default: the spec's reference): an implementation, "
                 "plugin:PATH or exec:COMMAND, which is called with f64 tensors")
      ->check(named("names no implementation (leave --reference out for the spec's reference)"));
  // An empty value (`--shard "$SHARD"` with SHARD unset) would silently mean
  // the flag was left out: a whole unsharded run in every shard's job.
  const auto given = [](const char* what) {
    return CLI::Validator([what](std::string& v) { return v.empty() ? std::string(what) : ""; }, "");
  };
  app.add_option("--seed", cfg.seed,
                 "seed (default: the spec's run.seed; 0 draws a fresh one, printed; --fuzz: a fresh one)")
      ->check(given("is empty (leave --seed out for the spec's run.seed; 0 draws a fresh one)"));
  const auto count = number_in(1, false, 1e9, "a whole number in [1, 1e9]", true);
  const auto seconds = number_in(0, false, 1e7, "a number of seconds in [0, 1e7]");
  // As run.case_timeout_s: below a millisecond the deadline truncated to 0 ns, which is no deadline.
  const auto timeout = number_in(0.001, false, 1e7, "a number of seconds in [0.001, 1e7]");
  app.add_option("--trials", cfg.trials,
                 "checked cases each invariant needs (up to trials x (1 + max_discard_ratio) are drawn)")
      ->transform(count);
  app.add_option("--time", cfg.time,
                 "time budget in seconds of the random cases (the search has its own, --search-time); 0: no "
                 "time limit (--fuzz: until Ctrl-C)")
      ->check(seconds);
  app.add_option("--case-timeout", cfg.case_timeout,
                 "seconds one target call may take before it counts as a hang (overrides run.case_timeout_s)")
      ->check(timeout);
  app.add_option("--max-case-mb", cfg.max_case_mb,
                 "memory one case may take on this machine, per job (overrides run.max_case_mb of the spec "
                 "and its profiles; --list --spec shows the largest case's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  auto* search_flag = app.add_flag(
      "--search", cfg.search,
      "after the random cases, hill-climb from those with the highest error/allowed ratio toward a "
      "failure (run.search; budget: --search-trials, --search-time)");
  app.add_option("--search-trials", cfg.search_trials, "cases the search may run (implies --search)")
      ->transform(count);
  app.add_option(
         "--search-time", cfg.search_time,
         "seconds the search may run, 0: no limit (overrides run.search.time_budget_s; implies --search)")
      ->check(seconds);
  app.add_option("--invariant", cfg.invariants, "check only these invariants (repeatable)");
  app.add_option("--suppress-health-check", cfg.suppress_health_check,
                 "a health check that does not fail this run: declined, discarded or too_slow (repeatable; "
                 "added to the spec's run.suppress_health_check)")
      ->check(CLI::IsMember({"declined", "discarded", "too_slow"}));
  app.add_flag(
      "--padded-tensors", cfg.padded_tensors,
      "run.padded_tensors for this run: a plugin: target gets every tensor of two or more dimensions "
      "with padded rows, so a kernel that ignores its strides fails (docs/EXTERNAL.md)");
  app.add_option("--skipped-exit", cfg.skipped_exit,
                 "exit code of a SKIPPED run, one that checked nothing (no device, every case declined): "
                 "default 0; e.g. 77 for ctest's SKIP_RETURN_CODE, 1 to fail a CI job")
      ->transform(number_in(0, false, 255, "an exit code in [0, 255]", true));
  app.add_option(
      "--format", cfg.format,
      "report format: text, json, junit or html (self-contained page: statistics, failures drawn)");
  app.add_flag(
      "--stats", cfg.stats,
      "print the run's statistics: sizes and dims drawn, checked/discarded/declined per invariant, the "
      "time split, error/bound ratios (JSON always has them); with --mutants, the kill matrix");
  app.add_option("--out", cfg.out, "write the report to FILE (text summary still on stdout)")
      ->check(given("names no file"));
  auto* corpus = app.add_option("--corpus", cfg.corpus, "corpus root (default: corpus/ beside specs/)")
                     ->check(given("names no folder"));
  app.add_flag("--no-corpus", cfg.no_corpus,
               "keep counterexamples out of the corpus (each is still written to .kprop/findings/<spec>/)")
      ->excludes(corpus);
  app.add_flag("--no-replay-check", cfg.no_replay_check,
               "do not re-run each finding's replay command in a fresh process (it is, by default, and the "
               "report says when the failure did not come back)");
  // Two plain flags, not one flag into the optional: CLI11 sets an
  // optional<bool> flag to false when it is not given, so --mutants never
  // got its default (isolated), and --no-isolate could not be told from
  // no flag.
  bool isolate_flag = false, no_isolate_flag = false;
  auto* isolate =
      app.add_flag("--isolate", isolate_flag,
                   "run each case of an in-process target in a forked child (default with --mutants)");
  app.add_flag("--no-isolate", no_isolate_flag, "check in this process (the default but with --mutants)")
      ->excludes(isolate);
  auto* mutants =
      app.add_flag("--mutants", cfg.mutants, "run every mutant of the family; exit 0 only if all die")
          ->excludes(target);  // each mutant is the target in turn (it ran them all, and said nothing)
  auto* replay = app.add_option("--replay", cfg.replay, "replay a corpus file or folder")
                     ->check(given("names no file or folder"))
                     ->excludes(mutants);
  app.add_flag("--output-coverage", cfg.output_coverage,
               "corrupt each output of the target (plugin:/exec:, a correct kernel) in turn and report the "
               "outputs no invariant catches; exit 1 if any")
      ->excludes(mutants)
      ->excludes(replay);
  // Where every invariant's verdict is the product (a mutant's kill, the
  // outputs each corruption is caught by, each stored case's verdicts), it is refused.
  app.add_flag("--fail-fast", cfg.fail_fast,
               "end the run at the first counterexample (shrunk and stored as always): the invariants it did "
               "not finish are reported not run, with the cases they checked, never passed")
      ->excludes(mutants)
      ->excludes(replay)
      ->excludes("--output-coverage");
  app.add_flag("--no-focus", cfg.no_focus,
               "draw every case from the whole domain, also where every invariant still checking observes "
               "only part of it (by default the run then draws from that part: docs/SPEC.md)")
      ->excludes(replay);
  app.add_flag("--list", cfg.list,
               "list families, implementations, invariants and spec keys; with --spec, the spec's outputs "
               "and the invariants that read them (unchecked outputs)");
  app.add_flag("--fuzz", cfg.fuzz,
               "coverage-guided fuzzing with each spec's libFuzzer harness (--time 0: until Ctrl-C)");
  app.add_option("--jobs", cfg.jobs,
                 "processes: property runs, --mutants and --replay of a folder check cases on N processes "
                 "with the verdicts of --jobs 1 (default: all cores); --fuzz: libFuzzer -fork=N (default 1)")
      ->transform(number_in(1, false, 4096, "a whole number of processes in [1, 4096]", true));
  app.add_option("--work", cfg.work,
                 "--fuzz: work folder for coverage corpora and crash inputs (one run at a time)")
      ->check(given("names no folder"));
  app.add_option("--fuzzer-dir", cfg.fuzzer_dir,
                 "--fuzz: folder with the harness fuzz_any_spec (default: fuzz/ beside prop_runner)")
      ->check(given("names no folder"));
  app.add_option("--import", cfg.imports,
                 "decode fuzzer inputs (crash files), shrink and store the failing ones")
      ->check(given("names no file"));
  app.add_option("--fuzz-seeds", cfg.fuzz_seeds, "write seed inputs for the spec's harness to DIR")
      ->check(given("names no folder"));
  app.add_option("--shard", cfg.shard,
                 "I/N: run shard I (0-based: 0 <= I < N) of N interleaved shards of the trials")
      ->check(given("is empty: give I/N"));
  try {
    app.parse(argc, argv);
    if (!cfg.list && cfg.specs.empty()) throw CLI::RequiredError("--spec");
    if (isolate_flag || no_isolate_flag) cfg.isolate = isolate_flag;
    cfg.search_given = search_flag->count() > 0;
    cfg.self = argv[0];
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);  // prints the version to stdout, exit 0
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "prop_runner: error: {} (see --help)\n", e.what());
    return 2;
  }
  try {
    return run(cfg);
  } catch (const InputError& e) {
    // Ctrl-C while a worker was starting (its handshake) is an interrupt, not bad input.
    if (interrupted()) {
      fmt::print(stderr, "prop_runner: interrupted ({})\n", e.what());
      return 130;
    }
    fmt::print(stderr, "prop_runner: error: {}\n", e.what());
    write_error_report(e.what(), 2);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "prop_runner: internal error: {}\n", e.what());
    write_error_report(std::string("internal error: ") + e.what(), 3);
    return 3;
  }
}
