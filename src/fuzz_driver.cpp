#include "kprop/fuzz_driver.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <utility>

#include "kprop/process.h"
#include "kprop/rng.h"
#include "kprop/runner.h"

namespace fs = std::filesystem;

namespace kprop {
namespace {

using Clock = std::chrono::steady_clock;

// A fuzzer input read whole, or an input error saying why not (a FIFO would
// block, /proc/self/mem threw from inside the stream).
std::vector<uint8_t> read_bytes(const std::string& path) {
  check_fuzz_input(path);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw InputError({path, 0, 0}, std::string("cannot read it: ") + e.what());
  }
  if (!in && !in.eof()) throw InputError({path, 0, 0}, "cannot read it");
  return bytes;
}

// A folder the user named (--work, --fuzz-seeds): one that cannot be made
// is an input error naming the flag, not an internal error.
void make_folder(const char* flag, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError({}, fmt::format("{} {}: cannot create the folder: {}", flag, dir.string(),
                                     ec ? ec.message() : "a file is in the way"));
}

// A spec's work folder is one run's at a time: its lock file, held with
// flock(2) while the run lasts. Two runs in one folder (the default
// .fuzz-work of one cwd) each imported the other's crash inputs against its
// own target (a clean run's UNREPRODUCED lines, exit 1), set them aside as
// an earlier run's, and merged the shared coverage corpus under each other.
// The kernel drops the lock when the run ends, however it ends; the file is
// close-on-exec, so the harness and libFuzzer's jobs do not hold it on.
class WorkLock {
 public:
  WorkLock(const std::string& work_dir, const std::string& spec) {
    const fs::path dir = fs::path(work_dir) / spec, file = dir / "lock";
    make_folder("--work", dir);
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw InputError({}, fmt::format("--work {}: cannot open its lock file {}: {}", work_dir, file.string(),
                                       std::strerror(errno)));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      if (err == EWOULDBLOCK)
        throw InputError({}, fmt::format("--work {}: another prop_runner --fuzz is using it (spec {}: {} is "
                                         "locked); wait for it to end or pass --work elsewhere",
                                         work_dir, spec, file.string()));
      throw InputError(
          {}, fmt::format("--work {}: cannot lock {}: {}", work_dir, file.string(), std::strerror(err)));
    }
  }
  WorkLock(WorkLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  WorkLock(const WorkLock&) = delete;
  WorkLock& operator=(const WorkLock&) = delete;
  WorkLock& operator=(WorkLock&&) = delete;
  ~WorkLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

// fuzz_any_spec: the harness for any spec, which it reads from KPROP_SPEC
// (the spec-named fuzz_<spec> are the same harness with a default spec, for
// ClusterFuzzLite; a spec of the user's own has none).
std::string harness_path(const Spec& spec, const FuzzOptions& o) {
  const fs::path p = fs::path(o.fuzzer_dir) / "fuzz_any_spec";
  if (!fs::exists(p))
    throw InputError(
        {p.string(), 0, 0},
        "no libFuzzer harness for spec " + spec.name +
            " (in a kprop checkout: `scripts/dev.sh build-san` and run build-san/prop_runner, or "
            "build-fuzz: coverage only; or --fuzzer-dir names the folder that has it)");
  return p.string();
}

// Parses libFuzzer's status lines ("#123 ... cov: 45 ... exec/s: 67 ...").
void parse_status(const std::string& line, FuzzSpecStats& s) {
  static const std::regex execs(R"(^#(\d+))"), cov(R"(cov: (\d+))"),
      crashes(R"(oom/timeout/crash: \d+/\d+/(\d+))");
  std::smatch m;
  if (std::regex_search(line, m, execs)) s.executions = std::stoll(m[1]);
  if (std::regex_search(line, m, cov)) s.coverage = std::stoll(m[1]);
  if (std::regex_search(line, m, crashes)) s.crash_inputs = std::stoll(m[1]);
}

// The harness's exit line (fuzz/harness.cpp say_tally): "kprop fuzz: tally:
// N input(s), C checked, D declined (why)". Returns false on another line.
struct Tally {
  long long inputs = 0, checked = -1, declined = 0;
  std::string why;  // the first decline's reason (or why nothing was checked)
};
bool parse_tally(const std::string& line, Tally& t) {
  static const std::regex tally(
      R"(^kprop fuzz: tally: (\d+) input\(s\), (\d+) checked, (\d+) declined(?: \((.*)\))?)");
  std::smatch m;
  if (!std::regex_search(line, m, tally)) return false;
  t.inputs = std::stoll(m[1]), t.checked = std::stoll(m[2]), t.declined = std::stoll(m[3]), t.why = m[4];
  return true;
}

// Why the output of libFuzzer's corpus merge (-merge=1 into `merged`, from
// `corpus`) must not replace the corpus, or "" when it may: the merge did
// not exit 0 (`status`, as waitpid gives it; `last_line` its last words),
// or a file it wrote is no whole copy of an input in `corpus`.
std::string fuzz_merge_failure(int status, const std::string& merged, const std::string& corpus,
                               const std::string& last_line) {
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fmt::format("libFuzzer's merge ended {}: {}",
                       WIFEXITED(status) ? fmt::format("with exit status {}", WEXITSTATUS(status))
                                         : fmt::format("on signal {}", WTERMSIG(status)),
                       last_line.empty() ? "(it printed nothing)" : last_line);
  // Every file it wrote must be a whole copy of an input: byte for byte the
  // input of its name (libFuzzer names both its corpus files and the
  // merge's by their content's hash), or else of its size (a corpus file
  // may have any name). And never empty: libFuzzer runs the empty input
  // itself before any corpus, so a 0-byte file is a write that failed; on a
  // full disk the fuzzing before the merge leaves empty inputs in the
  // corpus too, which every empty file of the merge's would match as a copy.
  std::map<uintmax_t, std::vector<fs::path>> inputs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(corpus, ec))
    if (entry.is_regular_file(ec)) inputs[entry.file_size(ec)].push_back(entry.path());
  int written = 0, bad = 0;
  for (const auto& entry : fs::directory_iterator(merged, ec)) {
    ++written;
    bool whole = false;
    try {
      const auto bytes = read_bytes(entry.path().string());
      const fs::path named = fs::path(corpus) / entry.path().filename();
      if (bytes.empty()) {
        whole = false;
      } else if (fs::is_regular_file(named)) {
        whole = read_bytes(named.string()) == bytes;
      } else if (const auto it = inputs.find(bytes.size()); it != inputs.end()) {
        for (const auto& input : it->second)
          if ((whole = read_bytes(input.string()) == bytes)) break;
      }
    } catch (const std::exception&) {
      whole = false;  // not a file that reads: no copy
    }
    bad += !whole;
  }
  if (ec) return fmt::format("the merge's output could not be read: {}", ec.message());
  if (bad > 0)
    return fmt::format(
        "libFuzzer's merge wrote {} file(s), {} of them empty or no whole copy of an input "
        "(a full disk?)",
        written, bad);
  return "";
}

}  // namespace

void check_fuzz_input(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError({path, 0, 0}, "is a folder, not a fuzzer input file");
  if (!fs::is_regular_file(path, ec))
    throw InputError({path, 0, 0}, fs::exists(path, ec) ? "not a regular file: a fuzzer input is a file"
                                                        : "no such fuzzer input");
}

int FuzzReport::new_findings() const {
  int n = 0;
  for (const auto& f : findings) n += f.is_new;
  return n;
}

bool FuzzReport::all_skipped() const {
  return !stats.empty() &&
         std::all_of(stats.begin(), stats.end(), [](const auto& s) { return !s.skipped.empty(); });
}

bool FuzzReport::health_failed() const {
  return std::any_of(stats.begin(), stats.end(), [](const auto& s) { return !s.health.empty(); });
}

int write_fuzz_seeds(const Spec& spec, const std::string& dir, int count, std::optional<uint64_t> seed) {
  make_folder("--fuzz-seeds", dir);
  int written = 0;
  for (int i = 0; i < count; ++i) {
    // Small to mid-size cases: the fuzzer grows them; full-size seeds make every run slow.
    const int size = count <= 1 ? 60 : i * 60 / (count - 1);
    const uint64_t case_seed = seed ? rng::hash(*seed, 0x5eed, uint64_t(i)) : uint64_t(i + 1);
    const auto bytes = spec.family->seed_bytes(spec.domain, case_seed, size);
    if (bytes.empty()) break;
    write_file_atomic((fs::path(dir) / fmt::format("seed-{:03}", i)).string(),
                      std::string(bytes.begin(), bytes.end()));
    ++written;
  }
  return written;
}

FuzzImport import_fuzz_input(const Spec& spec, const Impl& target, const std::string& path,
                             const std::string& corpus_root, bool write_corpus,
                             std::optional<double> case_timeout_s, const std::string& replay_program,
                             FuzzSeen* seen, uint64_t seed) {
  const auto bytes = read_bytes(path);
  const AnyCase c = spec.family->from_bytes(bytes.data(), bytes.size(), spec.domain);
  const std::string target_name = target.info.name;
  RunOptions options;
  options.target = target_name;
  options.target_transport = target.external;  // an external target is opened once, by the caller
  options.corpus_dir = corpus_root;
  options.write_corpus = write_corpus;
  options.found_by = "libfuzzer";
  options.case_timeout_s = case_timeout_s;  // the spec's was used: a slow target's call was a false hang
  options.replay_program = replay_program;
  const RunContext ctx = make_context(spec, options, seed);
  const auto trial = spec.family->begin_trial(c, ctx.target, ctx.reference);
  FuzzImport result;
  for (size_t k = 0; k < spec.invariants.size(); ++k) {
    const CheckResult r = check_one(ctx, *trial, spec.invariants[k], c);
    if (r.kind == CheckResult::Kind::declined) {  // not checked, whatever held before
      result.checked = 0;
      result.not_checked = "declined: " + r.reason;
      return result;
    }
    if (r.kind == CheckResult::Kind::verdict && r.verdict.outcome == Outcome::pass) ++result.checked;
    if (r.kind == CheckResult::Kind::verdict && r.verdict.outcome != Outcome::pass &&
        r.verdict.outcome != Outcome::fail && result.not_checked.empty())
      result.not_checked = "every invariant discarded it or is n/a (" + r.verdict.message + ")";
    if (!r.failed() && r.kind != CheckResult::Kind::target_failure) continue;
    // A fuzzer hits one bug thousands of times: keep a finding only if its
    // signature (invariant or failure kind, implementation) is new to the
    // corpus or its case is smaller than every stored one with that
    // signature. With --no-corpus, new to this run (`seen`): every crash
    // input of one bug was stored, and the scratch folder is no corpus to be
    // known in.
    const std::string invariant = r.failed() ? spec.invariants[k].name : "";
    // A target failure's kind (error, crash, hang, ...) is part of its
    // signature: an error and a crash of one target are two bugs. They were
    // one (invariant "" for both): a crash imported after an error was
    // "known" under the error's message, its shrunk file was removed, and
    // the replay printed reproduced the error. The kind is what the stored
    // file records as found_by (record_finding: a thrown exception is a
    // crash there too); an invariant's failure is known by the invariant
    // alone, whatever found it (rapidcheck, search, libfuzzer).
    const std::string failure = r.failed() ? "" : (r.failure_kind == "threw" ? "crash" : r.failure_kind);
    const std::string signature = spec.name + '\n' + invariant + '\n' + failure + '\n' + target_name;
    const fs::path dir = fs::path(corpus_root) / spec.name;
    int64_t known_size = -1;
    std::string known_path, known_message, known_summary;
    // This run's own first (a corpus that cannot be written kept its
    // findings in the scratch folder, where the corpus scan below does not
    // look: one bug's 17 crash inputs were 17 new findings).
    if (seen && seen->by_signature.count(signature)) {
      const auto& it = seen->by_signature.at(signature);
      known_size = it.size, known_path = it.path, known_message = it.message, known_summary = it.summary;
    } else if (write_corpus && fs::is_directory(dir)) {
      for (const auto& file : list_corpus(dir.string())) {
        try {
          const CorpusEntry known = read_entry(file);
          if (known.invariant == invariant && known.found_against == target_name &&
              (!invariant.empty() || known.found_by == failure)) {
            const CaseStats stats = spec.family->stats(spec.family->from_yaml(known.case_node));
            if (known_size < 0 || stats.size < known_size)
              known_size = stats.size, known_path = file, known_message = known.message,
              known_summary = stats.summary;
          }
        } catch (const std::exception&) {
          // an unreadable file is replay's problem, not the fuzzer's
        }
      }
    }
    const Finding f = record_finding(ctx, &spec.invariants[k], c, r);
    FuzzFinding out{spec.name, f.kind == "invariant" ? f.invariant : f.kind, f.message, f.stats.summary,
                    f.corpus_path};
    out.is_new = f.corpus_new;
    out.kind = f.kind;
    out.store_note = f.store_note;
    // Ctrl-C or the shrink budget stopped the shrink: the case is where it
    // stopped (49 nodes, where an --import of the same input ends at 3).
    if (f.shrink_interrupted) out.summary += " (shrinking stopped early: its budget or Ctrl-C)";
    if (known_size >= 0 && known_size <= f.stats.size) {
      // Known: the stored case is at least as small; drop the new file
      // (none when the shrink ended on the known case itself: same file).
      std::error_code ec;
      if (f.corpus_new && !f.corpus_path.empty() && f.corpus_path != known_path)
        fs::remove(f.corpus_path, ec);
      // What is printed is the stored case's, the file it points to.
      out.corpus_path = known_path;
      out.message = known_message.empty() ? out.message : known_message;
      out.summary = known_summary;
      out.store_note.clear();
      out.is_new = false;
    } else {
      // New to this run (with --no-corpus even where an earlier run left
      // the same file: the scratch folder is no corpus to be known in).
      if (!write_corpus) out.is_new = true;
      if (seen) seen->by_signature[signature] = {f.stats.size, f.corpus_path, f.message, out.summary};
    }
    if (!out.corpus_path.empty()) out.replay = replay_command(ctx, out.corpus_path, invariant);
    result.finding = out;
    return result;
  }
  if (result.checked > 0) result.not_checked.clear();
  return result;
}

FuzzReport run_fuzz(const std::vector<Spec>& specs, const FuzzOptions& o) {
  FuzzReport report;
  FuzzSeen seen;
  // Every spec's harness first: a missing one is an input error before any
  // work folder or seed input is written.
  std::vector<std::string> harnesses;
  for (const auto& spec : specs) harnesses.push_back(harness_path(spec, o));
  for (const auto& spec : specs) report.stats.push_back({spec.name});
  // Each spec's work folder locked before anything in it is touched (one
  // lock per name: a spec given twice is one folder, and a second flock of
  // it from this process would refuse this very run).
  std::map<std::string, WorkLock> locks;
  for (const auto& spec : specs)
    if (!locks.count(spec.name)) locks.emplace(spec.name, WorkLock(o.work_dir, spec.name));
  const bool continuous = o.time_s <= 0;
  // --time is the whole run's: each spec's slice is its share of what is
  // left, so the seed runs, merges and libFuzzer's wrap-up of the specs
  // before it come out of the budget (each slice was time / specs, and 5
  // specs at --time 1 took 14.5 s). libFuzzer fuzzes a whole second at least.
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(0.0, o.time_s)));
  const bool tty = isatty(2);
  for (int round = 0; !interrupted(); ++round) {
    for (size_t k = 0; k < specs.size() && !interrupted(); ++k) {
      const Spec& spec = specs[k];
      const double case_timeout = o.case_timeout_s.value_or(spec.run.case_timeout_s);
      const Impl target = resolve_target(spec, o.target.empty() ? spec.target : o.target, case_timeout);
      const std::string target_name = target.info.name;
      const fs::path work = fs::path(o.work_dir) / spec.name;
      const fs::path corpus = work / "corpus", seeds = work / "seeds", crashes = work / "crashes";
      make_folder("--work", corpus);
      make_folder("--work", crashes / "imported");
      if (round == 0) {
        // Crash inputs an earlier run left unimported (it was killed) are
        // no findings of this run: its target, profile or domain may differ,
        // or the bug be fixed since. They were imported against this run's
        // target and reported as failures that do not reproduce.
        int earlier = 0;
        for (const auto& entry : fs::directory_iterator(crashes)) {
          if (!entry.is_regular_file()) continue;
          make_folder("--work", crashes / "earlier");
          std::error_code ec;
          fs::rename(entry.path(), crashes / "earlier" / entry.path().filename(), ec);
          ++earlier;
        }
        if (earlier > 0)
          fmt::print(
              stderr,
              "[{}] {} crash input(s) an earlier run left unimported are set aside in {} (not this run's: "
              "prop_runner --import them with the --target they were fuzzed against)\n",
              spec.name, earlier, (crashes / "earlier").string());
      }
      if (!fs::exists(seeds)) {
        const int n = write_fuzz_seeds(spec, seeds.string(), o.seeds);
        fmt::print(stderr, "[{}] {} seed inputs from the spec's generator\n", spec.name, n);
      }
      const std::string& harness = harnesses[k];
      // The harness reads the spec, profile, domain overrides, memory budget and target
      // from its environment: the run's own, so that a crash input decodes
      // to the case the import below re-checks.
      const fs::path error_file = work / "harness_error.txt";
      const ProcessOptions env{{"KPROP_SPEC=" + spec.path, "KPROP_PROFILE=" + spec.profile,
                                "KPROP_DOMAIN=" + spec.domain_overrides,
                                "KPROP_MAX_CASE_MB=" + std::to_string(spec.max_case_mb_override),
                                "KPROP_TARGET=" + target_name, "KPROP_ERROR_FILE=" + error_file.string()}};
      // The spec's error on some input (an expression that cannot be
      // evaluated, a broken reference): the harness says it and exits 2, as
      // a property run does; the run ends on it, exit 2. (It was "0 new
      // findings", exit 0: the error's input left no crash file.)
      auto run_fuzzer = [&](const std::vector<std::string>& argv, const ProcessOptions& options,
                            const std::function<void(const std::string&)>& on_line) {
        static const std::string kError = "kprop fuzz: error: ";
        std::string error;
        ProcessResult result;
        std::error_code ec;
        fs::remove(error_file, ec);
        try {
          result = run_process(argv, options, [&](const std::string& line) {
            if (error.empty() && line.rfind(kError, 0) == 0) error = line.substr(kError.size());
            on_line(line);
          });
        } catch (const std::runtime_error& e) {
          throw InputError({argv[0], 0, 0}, e.what());
        }
        // Its line (a run without fork) or its file (a fork job's, whose
        // output libFuzzer keeps to itself).
        if (error.empty() && fs::exists(error_file)) {
          std::ifstream in(error_file);
          std::getline(in, error);
          if (error.empty()) error = "(no message)";
        }
        if (!error.empty())
          throw InputError({}, fmt::format("spec {}: the fuzz harness stopped: {}", spec.name, error));
        if (WIFEXITED(result.status) && WEXITSTATUS(result.status) == 2)
          throw InputError({}, fmt::format("spec {}: the fuzz harness {} exited 2 (an error in the spec or "
                                           "its setup; run it alone to see its output)",
                                           spec.name, argv[0]));
        return result;
      };
      FuzzSpecStats& stats = report.stats[k];
      const std::string timeout_flag =
          fmt::format("-timeout={}", std::max(1, static_cast<int>(std::ceil(case_timeout))));
      if (round == 0) {
        // The seed inputs once, in one process: a target that checks none of
        // them (declined every one, or cannot run here: no CUDA device) is
        // not fuzzed, and the run says so; hours of "0 findings" over inputs
        // it never checked would read as clean. A seed that fails is kept
        // with the crash inputs (imported below).
        Tally tally;
        std::string probe_last;
        run_fuzzer(
            {harness, "-runs=0", timeout_flag, "-artifact_prefix=" + crashes.string() + "/", seeds.string()},
            env, [&](const std::string& line) {
              if (!line.empty()) probe_last = line;
              Tally t;
              if (parse_tally(line, t)) tally = t;
            });
        const long long inputs = tally.inputs, checked = tally.checked;
        const std::string& why = tally.why;
        // No tally: the harness never got through its inputs (it could not
        // start, or died on something that is no finding: no crash input).
        bool kept_a_crash = false;
        for (const auto& entry : fs::directory_iterator(crashes))
          kept_a_crash = kept_a_crash || entry.is_regular_file();
        if (checked < 0 && !kept_a_crash && !interrupted())
          throw InputError(
              {}, fmt::format("spec {}: the fuzz harness's seed run ended without its tally: {}", spec.name,
                              probe_last.empty() ? "(it printed nothing)" : probe_last));
        if (checked == 0 && inputs > 0) {
          // libFuzzer runs an empty input before the seeds: 64 seeds are 65 inputs.
          stats.skipped = fmt::format(
              "the target checked none of the {} inputs of its seed run (the seed inputs and libFuzzer's "
              "empty one): {}",
              inputs, why.empty() ? "no reason given" : why);
          fmt::print(stderr, "[{}] not fuzzed: {}\n", spec.name, stats.skipped);
        } else if (most_declined(tally.declined, inputs) && !suppressed(spec.run, "declined")) {
          // The seed inputs are the spec's generator's cases: a target that
          // declines most of them declines most of what the fuzzer makes of
          // them, as a property run would fail its `declined` health check.
          // Fuzzed all the same (what it takes may hold a bug); the run ends
          // HEALTH CHECK FAILED (exit 2) unless it finds something.
          // (The harness's reason reads "declined: WHY".)
          const std::string reason = why.rfind("declined: ", 0) == 0 ? why.substr(10) : why;
          stats.health = fmt::format(
              "{:.1f}% of the seed inputs were declined by the target ({} of {}): {}; narrow the domain "
              "to what the target supports (--domain), or {}",
              100.0 * double(tally.declined) / double(inputs), tally.declined, inputs,
              reason.empty() ? "no reason given" : reason, suppress_advice("declined"));
          fmt::print(stderr, "[{}] HEALTH CHECK declined: {}\n", spec.name, stats.health);
        }
      }
      if (!stats.skipped.empty()) continue;
      const double slice = continuous ? o.slice_s
                                      : std::chrono::duration<double>(deadline - Clock::now()).count() /
                                            static_cast<double>(specs.size() - k);
      const auto t0 = Clock::now();
      auto last = t0;
      const long long execs_before = stats.executions;
      FuzzSpecStats now = stats;
      now.crash_inputs = 0;  // libFuzzer's count of this slice, from its first status line
      // libFuzzer's -seed is 32 bits, 0 meaning a fresh one: each spec and
      // round its own, from the run's seed.
      const uint64_t fuzzer_seed = rng::hash(o.seed, uint64_t(k), uint64_t(round)) % 0xffffffffULL + 1;
      fmt::print(stderr, "[{}] libFuzzer -seed={}\n", spec.name, fuzzer_seed);
      const std::vector<std::string> args = {
          harness,
          fmt::format("-fork={}", std::max(1, o.jobs)),
          fmt::format("-seed={}", fuzzer_seed),
          "-ignore_crashes=1",
          "-ignore_timeouts=1",
          "-ignore_ooms=1",
          fmt::format("-max_total_time={}", std::max(1, static_cast<int>(slice))),
          timeout_flag,
          "-artifact_prefix=" + crashes.string() + "/",
          corpus.string(),
          seeds.string()};
      // libFuzzer stops at -max_total_time, but not while a fork job is stuck
      // in a target that hangs past -timeout: the slice ends, at the latest,
      // two case timeouts and half a minute after it should have.
      ProcessOptions bounded = env;
      bounded.timeout_s = std::max(1.0, slice) + 2 * case_timeout + 30;
      std::string last_line;
      const ProcessResult fuzzed = run_fuzzer(args, bounded, [&](const std::string& line) {
        if (!line.empty()) last_line = line;
        parse_status(line, now);
        const double since = std::chrono::duration<double>(Clock::now() - last).count();
        if (since >= (tty ? 1.0 : 10.0)) {
          last = Clock::now();
          const double elapsed = std::chrono::duration<double>(last - t0).count();
          // libFuzzer's count of crashes (repeats of one bug included); the
          // summary's "crash inputs" are the files it kept.
          fmt::print(stderr, "{}[{}] {} {:.0f}s  execs {}  exec/s {:.0f}  cov {}  crashes {}  findings {}{}",
                     tty ? "\r\033[K" : "", spec.name, target_name, elapsed, now.executions,
                     now.executions / std::max(elapsed, 1e-9), now.coverage, now.crash_inputs,
                     report.new_findings(), tty ? "" : "\n");
        }
      });
      if (tty) fmt::print(stderr, "\r\033[K");
      if (fuzzed.timed_out)
        fmt::print(stderr, "[{}] the fuzzer ran {:.0f} s past its time (a hung target?) and was stopped\n",
                   spec.name, bounded.timeout_s - std::max(1.0, slice));
      // libFuzzer's fork mode ends on its own "INFO: exiting: N" line, N the
      // exit code of its last job (77 after an ignored crash). Any other end
      // (it could not write its temp files, the harness could not start:
      // 127, a signal) fuzzed nothing, and the run said "0 execs, 0 new
      // findings", exit 0, as a clean one.
      const bool ended_itself =
          WIFEXITED(fuzzed.status) && (WEXITSTATUS(fuzzed.status) == 0 ||
                                       (now.executions > 0 && last_line.starts_with("INFO: exiting:")));
      if (!interrupted() && !fuzzed.timed_out && !ended_itself)
        throw InputError({},
                         fmt::format("spec {}: libFuzzer ended {} after {} execs: {}", spec.name,
                                     WIFEXITED(fuzzed.status)
                                         ? fmt::format("with exit status {}", WEXITSTATUS(fuzzed.status))
                                         : fmt::format("on signal {}", WTERMSIG(fuzzed.status)),
                                     now.executions, last_line.empty() ? "(it printed nothing)" : last_line));
      stats.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      stats.executions = execs_before + now.executions;
      stats.coverage = std::max(stats.coverage, now.coverage);

      // Every crash input: decode, re-check, shrink, store; then set it aside.
      for (const auto& entry : fs::directory_iterator(crashes)) {
        if (!entry.is_regular_file()) continue;
        ++stats.crash_inputs;  // the files, not libFuzzer's counter of this slice
        const FuzzImport imported =
            import_fuzz_input(spec, target, entry.path().string(), o.corpus_root, o.write_corpus,
                              o.case_timeout_s, o.replay_program, &seen, o.seed);
        if (const auto& f = imported.finding) {
          if (f->is_new)
            fmt::print(stderr, "[{}] new finding: {}: {}\n  shrunk: {}{}{}{}\n", spec.name, f->what(),
                       f->message, f->summary, f->corpus_path.empty() ? "" : "\n  stored: " + f->corpus_path,
                       f->store_note.empty() ? "" : "\n  note: " + f->store_note,
                       f->replay.empty() ? "" : "\n  replay: " + f->replay);
          report.findings.push_back(*f);
        } else {
          const std::string name = entry.path().filename().string();
          fmt::print(stderr, "[{}] crash input {} did not fail again ({}); kept in {}\n", spec.name, name,
                     imported.checked > 0 ? "every invariant held" : imported.not_checked,
                     (crashes / "imported").string());
          if (name.rfind("crash-", 0) == 0 || name.rfind("leak-", 0) == 0)
            stats.unreproduced.push_back((crashes / "imported" / name).string());
        }
        std::error_code ec;
        fs::rename(entry.path(), crashes / "imported" / entry.path().filename(), ec);
      }
      // Merge the coverage corpus (minimise it) in place; not after Ctrl-C,
      // when a cut-short merge must not replace the corpus.
      if (interrupted()) break;
      const fs::path merged = work / "corpus.merged";
      fs::remove_all(merged);
      fs::create_directories(merged);
      // The merge runs every input once: a hanging one is cut at the case
      // timeout (libFuzzer's default would be 20 minutes).
      std::string merge_last;
      const ProcessResult merge =
          run_fuzzer({harness, "-merge=1", timeout_flag, merged.string(), corpus.string()}, env,
                     [&](const std::string& line) {
                       if (!line.empty()) merge_last = line;
                     });
      // The merge's output replaces the corpus only when it is whole: an
      // exit status of 0 and every file it wrote a copy of an input. libFuzzer
      // does not check its writes, so on a full disk it left empty files and
      // exited 0, and the corpus (155 of 157 inputs) was replaced by them.
      const std::string merge_failed =
          fuzz_merge_failure(merge.status, merged.string(), corpus.string(), merge_last);
      if (!merge_failed.empty()) {
        std::error_code ec;
        fs::remove_all(merged, ec);
        fmt::print(stderr, "[{}] the coverage corpus was not merged: {}; {} is kept as it was\n", spec.name,
                   merge_failed, corpus.string());
      } else if (!fs::is_empty(merged)) {
        // The old corpus goes only once the merged one is in its place.
        const fs::path old = work / "corpus.old";
        fs::remove_all(old);
        fs::rename(corpus, old);
        fs::rename(merged, corpus);
        fs::remove_all(old);
      } else {
        fs::remove_all(merged);  // nothing kept: the corpus stays as it was
      }
    }
    if (!continuous || report.all_skipped()) break;  // nothing left to fuzz
  }
  report.interrupted = interrupted();
  return report;
}

}  // namespace kprop
