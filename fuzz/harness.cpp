// The libFuzzer harness, one binary per spec (fuzz_<spec>): bytes are decoded
// by the spec's family into a case within the spec's domain, the spec's
// invariants are checked on its target, and a violation prints the case as
// YAML (ready for the corpus) and aborts so libFuzzer saves the input.
//
//   fuzz_dflash [libFuzzer flags] [corpus dirs]
//   KPROP_SPEC=specs/other.yaml KPROP_TARGET=positional_logits fuzz_dflash ...
//   fuzz_dflash -kprop_spec=PATH -kprop_target=NAME ...   (flags libFuzzer ignores)
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kprop/allocator.h"
#include "kprop/corpus.h"
#include "kprop/runner.h"

namespace {

struct Harness {
  kprop::Spec spec;
  kprop::RunOptions options;
  std::unique_ptr<kprop::RunContext> ctx;  // targets resolved once
};
Harness* g_harness = nullptr;

// What this process's inputs showed, said at exit (libFuzzer exits through
// exit() at -runs and -max_total_time): a fuzzer whose target declined every
// input, or could not run here (no CUDA device), checked nothing, and must
// not look like a clean run. prop_runner --fuzz reads the line after a probe
// run over the seed inputs (src/fuzz_driver.cpp).
struct Tally {
  long long inputs = 0, checked = 0, declined = 0;
  std::string why_not;  // the first decline, or why every invariant passed on it
};
Tally g_tally;

void say_tally() {
  if (!g_harness || g_tally.inputs == 0) return;
  fmt::print(stderr, "kprop fuzz: tally: {} input(s), {} checked, {} declined{}\n", g_tally.inputs,
             g_tally.checked, g_tally.declined, g_tally.why_not.empty() ? "" : " (" + g_tally.why_not + ")");
}

std::string flag(int argc, char** argv, const char* name, const char* env, const std::string& fallback) {
  const std::string prefix = std::string("-") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  if (const char* v = std::getenv(env); v && *v) return v;
  return fallback;
}

}  // namespace

// Defined per binary, in the one-line source fuzz/CMakeLists.txt generates for
// fuzz_<spec> (the harness itself is compiled once for all of them).
extern const char* const kprop_fuzz_default_spec;

// The spec: -kprop_spec=, $KPROP_SPEC, then <this binary>.yaml (how
// ClusterFuzzLite/OSS-Fuzz ships it beside the fuzzer in $OUT), then the
// source tree's spec this harness was built for.
std::string default_spec(const char* argv0) {
  const std::string beside = std::string(argv0) + ".yaml";
  if (FILE* f = std::fopen(beside.c_str(), "r")) {
    std::fclose(f);
    return beside;
  }
  return kprop_fuzz_default_spec;
}

// libFuzzer grows inputs slowly by default (-len_control), preferring short
// inputs as simpler. A kprop decoder reads shapes and case kinds (masks,
// dtypes, trees) from the first bytes and bulk values after them, so length
// is no measure of simplicity here: without this, mask kinds decoded after a
// few dozen bytes stay unreached for minutes. An explicit flag wins.
void default_len_control(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i)
    if (std::strncmp((*argv)[i], "-len_control=", 13) == 0) return;
  static std::vector<char*> args;
  args.assign(*argv, *argv + *argc);
  static char flag[] = "-len_control=0";
  args.insert(args.begin() + 1, flag);
  args.push_back(nullptr);
  *argc += 1;
  *argv = args.data();
}

#ifdef KPROP_FUZZ_COVERAGE_ONLY
constexpr bool kCoverageOnly = true;
#else
constexpr bool kCoverageOnly = false;
#endif

// The harness's own flags: a misspelt one (-kprop_tagret=) is an error, not
// libFuzzer's "unrecognized flag" warning, which it prints for the valid
// ones too, while the harness ran the spec's target.
void refuse_unknown_kprop_flags(int argc, char** argv) {
  std::vector<std::string> seen;  // a flag given twice: which value would the fork children get?
  for (int i = 1; i < argc; ++i) {
    // libFuzzer ignores what starts with "--": --kprop_target=X fuzzed the
    // spec's default target without a word.
    if (std::strncmp(argv[i], "--kprop_", 8) == 0) {
      fmt::print(stderr, "kprop fuzz: error: {}: kprop's harness flags take one dash (-{})\n", argv[i],
                 argv[i] + 2);
      std::exit(2);
    }
    if (std::strncmp(argv[i], "-kprop_", 7) != 0) continue;
    const char* eq = std::strchr(argv[i], '=');
    const std::string name(argv[i] + 1, eq ? size_t(eq - argv[i] - 1) : std::strlen(argv[i] + 1));
    if (name != "kprop_spec" && name != "kprop_target" && name != "kprop_profile" && name != "kprop_domain" &&
        name != "kprop_max_case_mb") {
      fmt::print(stderr,
                 "kprop fuzz: error: unknown flag -{} (valid: -kprop_spec=, -kprop_target=, -kprop_profile=, "
                 "-kprop_domain=, -kprop_max_case_mb=)\n",
                 name);
      std::exit(2);
    }
    if (!eq) {
      fmt::print(stderr, "kprop fuzz: error: -{} needs a value: -{}=...\n", name, name);
      std::exit(2);
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      fmt::print(stderr, "kprop fuzz: error: -{} is given twice\n", name);
      std::exit(2);
    }
    seen.push_back(name);
  }
}

// libFuzzer warns "unrecognized flag" for each of the harness's own flags
// (which took effect) and hands its argv on to fork-mode children: once
// read, they move to the environment variables the harness also reads
// (KPROP_SPEC, ...; children inherit them) and out of argv. Runs after
// refuse_unknown_kprop_flags: each has a known name and a value.
void move_kprop_flags_to_env(int* argc, char*** argv) {
  static std::vector<char*> args;
  std::vector<char*> kept;
  for (int i = 0; i < *argc; ++i) {
    char* a = (*argv)[i];
    if (i == 0 || std::strncmp(a, "-kprop_", 7) != 0) {
      kept.push_back(a);
      continue;
    }
    const char* eq = std::strchr(a, '=');
    std::string name(a + 1, size_t(eq - a - 1));
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    ::setenv(name.c_str(), eq + 1, 1);
  }
  args = std::move(kept);
  *argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  *argv = args.data();
}

// The case as YAML under `case:`, indented as a corpus file holds it.
std::string case_text(const kprop::Spec& spec, const kprop::AnyCase& c) {
  const std::string yaml = kprop::emit_yaml(spec.family->to_yaml(c));
  std::string out;
  size_t at = 0;
  while (at < yaml.size()) {
    const size_t end = yaml.find('\n', at);
    const size_t next = end == std::string::npos ? yaml.size() : end + 1;
    out += "  " + yaml.substr(at, next - at);
    at = next;
  }
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  kprop::tune_allocator();
  refuse_unknown_kprop_flags(*argc, *argv);
  default_len_control(argc, argv);
  const std::string spec_path = flag(*argc, *argv, "kprop_spec", "KPROP_SPEC", default_spec((*argv)[0]));
  if (spec_path.empty()) {  // fuzz_any_spec
    fmt::print(stderr, "kprop fuzz: error: no spec: -kprop_spec=PATH or KPROP_SPEC=PATH\n");
    std::exit(2);
  }
  try {
    const std::string profile = flag(*argc, *argv, "kprop_profile", "KPROP_PROFILE", "");
    // prop_runner --fuzz --domain: the same overrides, so the bytes decode
    // to the cases the run's import re-checks.
    const std::string domain = flag(*argc, *argv, "kprop_domain", "KPROP_DOMAIN", "");
    // ... and its --max-case-mb (0: the spec's), which such a domain may need.
    const std::string budget = flag(*argc, *argv, "kprop_max_case_mb", "KPROP_MAX_CASE_MB", "0");
    int64_t max_case_mb = 0;
    if (const auto [end, ec] = std::from_chars(budget.data(), budget.data() + budget.size(), max_case_mb);
        ec != std::errc() || end != budget.data() + budget.size() || max_case_mb < 0)
      throw std::invalid_argument("-kprop_max_case_mb must be a number of MB, got '" + budget + "'");
    auto* h = new Harness{kprop::load_spec(spec_path, profile, domain, max_case_mb), {}, nullptr};
    const std::string target = flag(*argc, *argv, "kprop_target", "KPROP_TARGET", h->spec.target);
    h->options.target = target;
    h->options.crash_guard = false;  // libFuzzer saves the crashing input itself
    h->ctx = std::make_unique<kprop::RunContext>(kprop::make_context(h->spec, h->options, 0));
    g_harness = h;
    std::atexit(say_tally);
    move_kprop_flags_to_env(argc, argv);
    // A coverage-only build (KPROP_FUZZ_SANITIZE=OFF) says so: what it
    // checks is the invariants, and a memory error passes unreported.
    fmt::print(stderr, "kprop fuzz: spec {} ({}{}{}), target {}{}\n", h->spec.name, spec_path,
               profile.empty() ? "" : ", profile " + profile, domain.empty() ? "" : ", domain " + domain,
               target, kCoverageOnly ? " (coverage only: no sanitizer, memory errors unreported)" : "");
  } catch (const std::exception& e) {
    fmt::print(stderr, "kprop fuzz: error: {}\n", e.what());
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kprop::Spec& spec = g_harness->spec;
  const kprop::AnyCase c = spec.family->from_bytes(data, size, spec.domain);
  // One trial for every invariant: target and reference run once per input.
  const auto trial = spec.family->begin_trial(c, g_harness->ctx->target, g_harness->ctx->reference);
  ++g_tally.inputs;
  bool checked = false;
  for (const auto& use : spec.invariants) {
    kprop::CheckResult r;
    try {
      r = kprop::check_one(*g_harness->ctx, *trial, use, c);
    } catch (const kprop::InputError& e) {
      // The spec's error (a broken reference, an expression that cannot be
      // evaluated on this case): no finding of the target; stop and say it.
      fmt::print(stderr, "\nkprop fuzz: error: {}\ncase:\n{}", e.what(), case_text(spec, c));
      // libFuzzer's fork mode shows a job's output only for crashes, and
      // takes this exit for one it ignores: prop_runner --fuzz reads the
      // error from this file (KPROP_ERROR_FILE) after each run.
      if (const char* path = std::getenv("KPROP_ERROR_FILE"); path && *path)
        if (std::FILE* f = std::fopen(path, "w")) {
          fmt::print(f, "{}\n", e.what());
          std::fclose(f);
        }
      std::_Exit(2);
    }
    if (r.kind == kprop::CheckResult::Kind::declined) {
      ++g_tally.declined;
      if (g_tally.why_not.empty())
        g_tally.why_not = (r.unavailable ? "unavailable: " : "declined: ") + r.reason;
      return 0;
    }
    if (r.kind == kprop::CheckResult::Kind::verdict && r.verdict.outcome == kprop::Outcome::pass)
      checked = true;
    if (r.failed() || r.kind == kprop::CheckResult::Kind::target_failure) {
      fmt::print(
          stderr, "\nkprop fuzz: {} by target {}: {}\ncase:\n{}",
          r.failed() ? "invariant " + use.name + " violated" : "target failure (" + r.failure_kind + ")",
          g_harness->ctx->target_name, r.failed() ? r.verdict.message : r.reason, case_text(spec, c));
      std::abort();
    }
  }
  if (checked)
    ++g_tally.checked;
  else if (g_tally.why_not.empty())
    g_tally.why_not = "every invariant discarded an input or is n/a";
  return 0;
}
