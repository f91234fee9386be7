// prop_runner: the command-line front end. The flag table below is the whole
// CLI contract (DESIGN.md); exit codes: 0 held, 1 an invariant failed,
// 2 usage/spec/corpus error, 3 the target crashed or an internal error.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "kprop/report.h"
#include "kprop/runner.h"

namespace fs = std::filesystem;
using namespace kprop;

namespace {

struct Config {
  std::string spec;
  std::string target;
  std::optional<uint64_t> seed;
  std::optional<int64_t> trials;
  std::optional<double> time;
  std::vector<std::string> invariants;
  std::string format = "text";
  std::string out;
  std::string corpus;
  bool no_corpus = false;
  bool mutants = false;
  std::string replay;
  bool list = false;
};

std::string list_everything() {
  std::string out = "Spec keys (every spec):\n" + describe_spec_keys();
  for (const Family* f : Registry::instance().families()) {
    out += fmt::format("\nfamily {} — {}\n  domain:\n{}", f->name(), f->description(),
                       describe_schema(f->domain_schema(), 4));
    out += "  implementations:\n";
    for (const auto& i : f->implementations())
      out += fmt::format("    {:<26} {:<9} {:<4} {}\n", i.name, impl_kind_name(i.kind), i.device,
                         i.description);
    out += "  invariants:\n";
    for (const auto& inv : f->invariants()) {
      out += fmt::format("    {:<26} {}\n", inv.name, inv.description);
      out += describe_schema(inv.params, 6);
    }
  }
  return out;
}

// corpus/ beside the spec's folder (specs/x.yaml -> corpus/), so the run
// stores counterexamples in the repository wherever it is started from.
std::string default_corpus_dir(const std::string& spec_path) {
  const fs::path dir = fs::absolute(spec_path).parent_path();
  if (dir.filename() == "specs") return (dir.parent_path() / "corpus").lexically_relative(fs::current_path()).string();
  return "corpus";
}

int run(const Config& cfg) {
  if (cfg.list) {
    std::cout << list_everything();
    return 0;
  }
  auto reporter = make_reporter(cfg.format);
  if (!reporter) throw InputError({}, "--format " + cfg.format + ": valid: " + join(reporter_names()));
  const Spec spec = load_spec(cfg.spec);

  RunOptions options;
  options.target = cfg.target;
  if (!options.target.empty()) resolve_target(spec, options.target);
  options.seed = cfg.seed;
  options.trials = cfg.trials;
  options.time_budget_s = cfg.time;
  options.only_invariants = cfg.invariants;
  options.corpus_dir = cfg.corpus.empty() ? default_corpus_dir(cfg.spec) : cfg.corpus;
  options.write_corpus = !cfg.no_corpus;
  options.progress = cfg.format == "text" && cfg.out.empty();
  install_interrupt_handler();

  std::string text, formatted;
  int code = 0;
  const auto text_reporter = make_reporter("text");
  if (!cfg.replay.empty()) {
    const auto rows = replay_corpus(spec, cfg.replay, options);
    for (const auto& r : rows) code = (!r.target_ok || !r.mutant_still_fails) ? 1 : code;
    text = text_reporter->replay(spec, rows);
    formatted = reporter->replay(spec, rows);
  } else {
    if (!options.seed && spec.run.seed == 0) options.seed = fresh_seed();
    fmt::print(stderr, "kprop: spec {} seed {}\n", spec.name, options.seed.value_or(spec.run.seed));
    if (cfg.mutants) {
      const auto rows = run_mutants(spec, options);
      for (const auto& r : rows) {
        if (!r.killed && r.report.status != RunStatus::skipped) code = 1;
        if (r.report.status == RunStatus::interrupted) code = 130;
      }
      text = text_reporter->mutants(spec, rows);
      formatted = reporter->mutants(spec, rows);
    } else {
      const RunReport report = run_spec(spec, options);
      code = exit_code(report.status);
      text = text_reporter->run(report);
      formatted = reporter->run(report);
    }
  }
  if (!cfg.out.empty()) {
    write_file_atomic(cfg.out, formatted);
    std::cout << text;
  } else {
    std::cout << formatted;
  }
  std::cout.flush();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kprop property runner: checks a kernel against a YAML spec", "prop_runner"};
  Config cfg;
  app.add_option("--spec", cfg.spec, "spec file (specs/*.yaml)")->check(CLI::ExistingFile);
  app.add_option("--target", cfg.target, "implementation under test (default: the spec's target)");
  app.add_option("--seed", cfg.seed, "seed (default: the spec's; 0 or none draws a fresh one)");
  app.add_option("--trials", cfg.trials, "cases to draw")->check(CLI::PositiveNumber);
  app.add_option("--time", cfg.time, "time budget in seconds")->check(CLI::PositiveNumber);
  app.add_option("--invariant", cfg.invariants, "check only these invariants (repeatable)");
  app.add_option("--format", cfg.format, "report format: text, json or junit");
  app.add_option("--out", cfg.out, "write the report to FILE (text summary still on stdout)");
  auto* corpus = app.add_option("--corpus", cfg.corpus, "corpus root (default: corpus/ beside specs/)");
  app.add_flag("--no-corpus", cfg.no_corpus, "do not store counterexamples")->excludes(corpus);
  auto* mutants = app.add_flag("--mutants", cfg.mutants, "run every mutant of the family; exit 0 only if all die");
  app.add_option("--replay", cfg.replay, "replay a corpus file or folder")->excludes(mutants);
  app.add_flag("--list", cfg.list, "list families, implementations, invariants and spec keys");
  try {
    app.parse(argc, argv);
    if (!cfg.list && cfg.spec.empty()) throw CLI::RequiredError("--spec");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "prop_runner: {} (see --help)\n", e.what());
    return 2;
  }
  try {
    if (cfg.seed && *cfg.seed == 0) cfg.seed.reset();
    return run(cfg);
  } catch (const InputError& e) {
    fmt::print(stderr, "prop_runner: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "prop_runner: internal error: {}\n", e.what());
    return 3;
  }
}
