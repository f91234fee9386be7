// Targeted search: hill-climbing on the error-to-bound ratio (kprop/search.h).
#include "kprop/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "kprop/case_yaml.h"
#include "kprop/clock.h"
#include "kprop/rng.h"
#include "kprop/runner.h"

namespace kprop {

// ------------------------------------------------------------ ratios
const std::vector<double>& RatioHistogram::edges() {
  static const std::vector<double> e = {1e-3, 1e-2, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0};
  return e;
}

void RatioHistogram::add(double ratio) {
  const auto& e = edges();
  if (counts.empty()) counts.assign(e.size() + 1, 0);
  ++counts[size_t(std::lower_bound(e.begin(), e.end(), ratio) - e.begin())];
}

int64_t RatioHistogram::total() const {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return n;
}

std::string RatioHistogram::text() const {
  std::string out;
  const auto& e = edges();
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    out += fmt::format("{}{}{:g}: {}", out.empty() ? "" : ", ", i < e.size() ? "<=" : ">",
                       e[std::min(i, e.size() - 1)], counts[i]);
  }
  return out;
}

namespace {
double ratio_of(const Verdict& v) {
  for (const Measured& m : v.measured)
    if (m.name == kErrorRatio) return m.value;
  return -1;
}
bool is_output_ratio(const Measured& m) {
  return m.name.compare(0, std::char_traits<char>::length(kErrorRatioOf), kErrorRatioOf) == 0;
}
std::string output_of(const Measured& m) {
  return m.name.substr(std::char_traits<char>::length(kErrorRatioOf));
}
}  // namespace

void note_ratios(InvariantReport& ir, const Verdict& v) {
  for (const Measured& m : v.measured) {
    if (m.name == kErrorRatio) {
      ir.max_error_ratio = std::max(ir.max_error_ratio, m.value);
      ir.ratios.add(m.value);
    } else if (is_output_ratio(m)) {
      auto [it, fresh] = ir.output_ratios.emplace(output_of(m), m.value);
      if (!fresh) it->second = std::max(it->second, m.value);
    }
  }
}

Verdict for_output(const std::string& output, Verdict v) {
  if (v.outcome != Outcome::pass) return v;
  const double r = ratio_of(v);
  if (r >= 0) v.measured.push_back({kErrorRatioOf + output, r});
  return v;
}

// ------------------------------------------------------------ the search
namespace {

// Per invariant, the random phase's cases with the highest ratios are the
// starting points: a few, so a climb stuck on one can restart on another.
constexpr size_t kStarts = 4;
// Moves without an improvement before a climb restarts from the next start.
constexpr int kPatience = 24;
// Moves that leave the domain are not cases; past this many per allowed
// case the search stops (a domain that rejects nearly every move).
constexpr int64_t kMaxRejectedPerCase = 50;
// Every climb's share of the turns, besides its ratio.
constexpr double kFloorShare = 0.05;
// The stream of kprop::rng draws that steer the search (any constant).
constexpr uint64_t kStream = 0x5ea5c4;

// A case with what reproduces it as fuzz bytes (empty: not known, e.g. after
// a tensor move, which bytes cannot describe).
struct Node {
  AnyCase c;
  std::vector<uint8_t> bytes;
};

struct Start {
  double ratio = -1;
  AnyCase c;
  rc::Random random;
  int size = 0;
  bool whole_domain = true;  // drawn from the spec's domain (Search::offer)
};

// A YAML number: its value, and whether it is one (".inf", "-.inf", ".nan"
// are numbers too, non-finite).
bool number_of(const std::string& t, double& out) {
  if (t.empty()) return false;
  if (t == ".inf" || t == ".Inf" || t == "+.inf") return out = HUGE_VAL, true;
  if (t == "-.inf" || t == "-.Inf") return out = -HUGE_VAL, true;
  if (t == ".nan" || t == ".NaN") return out = std::nan(""), true;
  if (t == "-.nan" || t == "-.NaN") return out = -std::nan(""), true;
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}
bool number_of(const YAML::Node& n, double& out) {
  return n.IsScalar() && !case_yaml::is_packed(n) && number_of(n.Scalar(), out);
}

// The numbers of a case's YAML tree as tensors: every sequence of numbers is
// a row, rows under the same map key path form one tensor.
// A packed list (case_yaml.h) stays one node: its numbers are parsed into
// values and written back as one list, where a node per number cost ~500
// bytes each (a search on a 2 x 262144 layernorm case peaked at 842 MB).
struct Row {
  YAML::Node seq;  // the tree's node: a sequence, or a packed list
  std::vector<double> values;
};
struct Tensor {
  std::string path;
  std::vector<Row> rows;
  bool integral = true;  // every finite value an integer (ids, lengths, integer data)
  double magnitude = 0;  // largest finite |x|
};

void collect(const YAML::Node& n, const std::string& path, std::map<std::string, Tensor>& out) {
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it)
      collect(it->second, path + "/" + it->first.as<std::string>(""), out);
    return;
  }
  const bool packed = case_yaml::is_packed(n);
  if (!(packed || n.IsSequence()) || case_yaml::list_size(n) == 0) return;
  Row row{n, {}};
  bool numbers = true;
  if (packed) {
    case_yaml::for_each_item(n, [&](const case_yaml::Item& item) {
      double x = 0;
      numbers = numbers && number_of(std::string(item.text), x);
      row.values.push_back(x);
    });
  } else {
    for (size_t i = 0; i < n.size() && numbers; ++i) {
      double x = 0;
      numbers = number_of(n[i], x);
      row.values.push_back(x);
    }
  }
  if (numbers) {
    Tensor& t = out[path];
    t.path = path;
    for (double x : row.values)
      if (std::isfinite(x)) {
        t.integral = t.integral && x == std::round(x);
        t.magnitude = std::max(t.magnitude, std::fabs(x));
      }
    t.rows.push_back(std::move(row));
    return;
  }
  if (!packed)
    for (size_t i = 0; i < n.size(); ++i) collect(n[i], path + "[]", out);
}

int non_finite_numbers(const YAML::Node& n) {
  if (n.IsMap()) {
    int k = 0;
    for (auto it = n.begin(); it != n.end(); ++it) k += non_finite_numbers(it->second);
    return k;
  }
  if (n.IsSequence()) {
    int k = 0;
    for (size_t i = 0; i < n.size(); ++i) k += non_finite_numbers(n[i]);
    return k;
  }
  if (case_yaml::is_packed(n)) {
    int k = 0;
    case_yaml::for_each_item(n, [&](const case_yaml::Item& item) {
      double x = 0;
      k += number_of(std::string(item.text), x) && !std::isfinite(x);
    });
    return k;
  }
  double x = 0;
  return number_of(n, x) && !std::isfinite(x);
}

// Counter-based draws (kprop/rng.h): the search path is a function of the
// run's seed and of the order of its own draws only.
class Dice {
 public:
  explicit Dice(uint64_t seed) : seed_(seed) {}
  uint64_t next() { return rng::hash(seed_, kStream, n_++); }
  size_t below(size_t n) { return n ? size_t(next() % n) : 0; }
  bool chance(double p) { return double(next() >> 11) * 0x1.0p-53 < p; }
  template <typename T>
  const T& pick(std::initializer_list<T> options) {
    return *(options.begin() + below(options.size()));
  }

 private:
  uint64_t seed_, n_ = 0;
};

}  // namespace

struct Search::State {
  const RunContext& ctx;
  std::vector<const InvariantUse*> uses;
  std::vector<std::vector<Start>> starts;  // per use, best first
  Dice dice;

  State(const RunContext& c, std::vector<const InvariantUse*> u)
      : ctx(c), uses(std::move(u)), starts(uses.size()), dice(rng::mix(c.seed ^ kStream)) {}

  const Family& family() const { return *ctx.spec.family; }
  const Values& domain() const { return ctx.spec.domain; }

  // The bytes the fuzz decoder turns into the case drawn from `random` at `size`.
  std::vector<uint8_t> bytes_of(const Start& s) const {
    if (!s.whole_domain) return {};
    auto bytes = std::make_shared<std::vector<uint8_t>>();
    const Family* f = &family();
    const Values d = domain();
    try {
      rc::gen::exec([f, d, bytes] {
        bytes->clear();  // RapidCheck may run the body more than once
        RapidCheckDraw draw(bytes.get());
        return f->build(draw, d);
      })(s.random, s.size)
          .value();
    } catch (const std::exception&) {
      bytes->clear();
    }
    return *bytes;
  }

  // A case from a candidate, or nothing when it leaves the domain.
  std::optional<Node> accept(AnyCase c, std::vector<uint8_t> bytes, int non_finite_before) const {
    try {
      if (!c || !family().in_domain(c, domain()).empty()) return std::nullopt;
      if (non_finite_before >= 0 && non_finite_numbers(family().to_yaml(c)) > non_finite_before)
        return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
    return Node{std::move(c), std::move(bytes)};
  }

  // ---- moves
  std::optional<Node> byte_move(const Node& from) {
    std::vector<uint8_t> b = from.bytes;
    // Half the moves hit the first bytes, where families draw dims and tiles.
    const size_t p = dice.chance(0.5) ? dice.below(std::min<size_t>(16, b.size())) : dice.below(b.size());
    switch (dice.below(4)) {
      case 0:
        ++b[p];
        break;
      case 1:
        --b[p];
        break;
      case 2:
        b[p] = dice.chance(0.5) ? 0 : 0xff;
        break;
      default:
        b[p] = uint8_t(dice.next());
        break;
    }
    try {
      return accept(family().from_bytes(b.data(), b.size(), domain()), std::move(b), -1);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  std::optional<Node> shrink_move(const Node& from) {
    try {
      auto seq = family().shrinks(from.c, domain());
      const size_t want = dice.below(8);
      std::optional<AnyCase> got;
      for (size_t i = 0; i <= want; ++i) {
        auto next = seq.next();
        if (!next) break;
        got = std::move(*next);
      }
      if (!got) return std::nullopt;
      return accept(std::move(*got), {}, -1);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  // One change of the case's numbers (docs/SPEC.md "Targeted search").
  std::optional<Node> tensor_move(const Node& from) {
    YAML::Node tree;
    std::map<std::string, Tensor> tensors;
    try {
      // Its numbers edited in place (a fresh tree: to_yaml builds one).
      tree = family().to_yaml(from.c);
      collect(tree, "", tensors);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (tensors.empty()) return std::nullopt;
    const int non_finite_before = non_finite_numbers(tree);
    auto it = tensors.begin();
    std::advance(it, long(dice.below(tensors.size())));
    Tensor& t = it->second;
    const double m = t.magnitude > 0 ? t.magnitude : 1;
    Row& row = t.rows[dice.below(t.rows.size())];
    const size_t at = dice.below(row.values.size());
    auto each = [&](auto&& f) {
      for (Row& r : t.rows)
        for (double& x : r.values) x = f(x);
    };
    auto in_row = [&](auto&& f) {
      for (double& x : row.values) x = f(x);
    };
    // The values before the move: a value the move takes out of the finite
    // range is written back as it was.
    std::vector<std::vector<double>> before;
    for (const Row& r : t.rows) before.push_back(r.values);
    const double sign = dice.chance(0.5) ? 1 : -1;
    switch (dice.below(10)) {
      case 0: {  // scale the tensor (toward overflow or toward underflow), or flip its sign
        const double f = dice.pick({2.0, 8.0, 64.0, 0.5, 0.125, -1.0});
        each([f](double x) { return x * f; });
        break;
      }
      case 1: {  // shift the tensor
        const double c = sign * m * dice.pick({0.5, 2.0, 16.0});
        each([c](double x) { return x + c; });
        break;
      }
      case 2:  // one element far out
        row.values[at] = sign * m * dice.pick({1.0, 4.0, 64.0, 1024.0});
        break;
      case 3: {  // a constant row (every element ties)
        const double c = dice.chance(0.5) ? row.values[at] : sign * m;
        in_row([c](double) { return c; });
        break;
      }
      case 4:  // one tie
        row.values[dice.below(row.values.size())] = row.values[at];
        break;
      case 5: {  // alternating signs along a row
        bool plus = dice.chance(0.5);
        in_row([&plus](double x) { return (plus = !plus) ? std::fabs(x) : -std::fabs(x); });
        break;
      }
      case 6: {  // one row scaled
        const double f = dice.pick({4.0, 64.0, 0.25});
        in_row([f](double x) { return x * f; });
        break;
      }
      case 7:  // a nudge, for the last steps of a climb
        row.values[at] += t.integral ? sign : sign * m * std::ldexp(1.0, -int(4 + dice.below(16)));
        break;
      case 8:  // one sign flipped
        row.values[at] = -row.values[at];
        break;
      default:  // a row of the largest magnitude, one sign
        in_row([v = sign * m](double) { return v; });
        break;
    }
    // Written back: integers stay integers (ids, lengths), reals round-trip;
    // a value the move made non-finite keeps its old one.
    const auto text = [&](double x) -> std::string {
      if (std::isnan(x)) return std::signbit(x) ? "-.nan" : ".nan";
      if (std::isinf(x)) return x > 0 ? ".inf" : "-.inf";
      if (t.integral) x = std::round(x);
      return t.integral && std::fabs(x) < 9e15 ? fmt::format("{}", int64_t(x)) : fmt::format("{:.17g}", x);
    };
    for (size_t k = 0; k < t.rows.size(); ++k) {
      Row& r = t.rows[k];
      const std::vector<double>& old = before[k];
      const auto value = [&](size_t i) { return std::isfinite(r.values[i]) ? r.values[i] : old[i]; };
      if (case_yaml::is_packed(r.seq)) {
        // Assigning to the tree's node handle replaces the node in the tree.
        r.seq = case_yaml::text_list(r.values.size(), [&](size_t i) { return text(value(i)); });
        continue;
      }
      for (size_t i = 0; i < r.values.size(); ++i)
        if (std::isfinite(r.values[i])) r.seq[i] = text(r.values[i]);
    }
    try {
      return accept(family().from_yaml(tree), {}, non_finite_before);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  std::optional<Node> move(const Node& from) {
    const double roll = double(dice.next() >> 11) * 0x1.0p-53;
    if (!from.bytes.empty() && roll < 0.3) return byte_move(from);
    if (roll < 0.85) return tensor_move(from);
    return shrink_move(from);
  }
};

Search::Search(const RunContext& ctx, std::vector<const InvariantUse*> uses)
    : s_(std::make_unique<State>(ctx, std::move(uses))) {}
Search::~Search() = default;

bool Search::enabled() const {
  return s_->ctx.run.search && s_->ctx.run.search_trials > 0;
}

void Search::offer(const rc::Random& random, int size, const AnyCase& c, const std::vector<size_t>& live,
                   const std::vector<CheckResult>& results, bool whole_domain) {
  for (size_t n = 0; n < results.size() && n < live.size(); ++n) {
    if (results[n].kind != CheckResult::Kind::verdict || results[n].verdict.outcome != Outcome::pass)
      continue;
    const double r = ratio_of(results[n].verdict);
    if (r < 0) continue;
    auto& pool = s_->starts[live[n]];
    if (pool.size() == kStarts && r <= pool.back().ratio) continue;
    Start s{r, c, random, size, whole_domain};
    // Stable: among equal ratios the earlier case stays first.
    pool.insert(
        std::upper_bound(pool.begin(), pool.end(), r, [](double x, const Start& y) { return x > y.ratio; }),
        std::move(s));
    if (pool.size() > kStarts) pool.pop_back();
  }
}

void Search::run(RunReport& report, RunListener& events) {
  State& st = *s_;
  const RunContext& ctx = st.ctx;
  if (!enabled()) return;
  SearchReport& sr = report.search;
  sr.ran = true;
  sr.budget = ctx.run.search_trials;

  // The hunted: invariants that held so far and reported ratios.
  struct Climb {
    size_t use;
    size_t search;  // into sr.invariants
    Node current;
    double ratio = -1;
    size_t start = 0;
    int stale = 0;
    Node best;
    double best_ratio = -1;
  };
  std::vector<Climb> climbs;
  for (size_t k = 0; k < st.uses.size(); ++k) {
    if (report.invariants[k].status != InvariantStatus::passed || st.starts[k].empty()) continue;
    const Start& s0 = st.starts[k].front();
    SearchInvariant si;
    si.name = st.uses[k]->name;
    si.start_ratio = report.invariants[k].max_error_ratio;
    sr.invariants.push_back(si);
    Node n{s0.c, st.bytes_of(s0)};
    climbs.push_back({k, sr.invariants.size() - 1, n, s0.ratio, 0, 0, n, s0.ratio});
  }
  if (climbs.empty()) {
    sr.note = "no invariant that held reported an error ratio (nothing to climb)";
    return;
  }

  RunOptions search_options = ctx.options;
  search_options.found_by = "search";
  // RunContext holds its options by reference: rebuild it around the copy.
  RunContext found_ctx{ctx.spec,        search_options, ctx.target, ctx.reference,
                       ctx.target_name, ctx.seed,       ctx.run,    ctx.reference_name};

  const auto t0 = Clock::now();
  const double before = report.seconds;
  int64_t rejected_in_a_row = 0;
  std::optional<std::string> lost;  // the target (or reference) became unavailable: its reason
  while (!climbs.empty() && sr.cases < sr.budget) {
    if (interrupted()) break;
    if (ctx.run.search_time_budget_s > 0 && since(t0) > ctx.run.search_time_budget_s) {
      sr.time_budget_hit = true;
      break;
    }
    // Turns go to the climbs in proportion to how close each already is
    // (its ratio, plus a share for those still far), so the budget goes
    // where a failure is nearest.
    double total = 0;
    for (const Climb& c : climbs) total += std::max(c.ratio, 0.0) + kFloorShare;
    double pick = double(st.dice.next() >> 11) * 0x1.0p-53 * total;
    size_t mover = 0;
    while (mover + 1 < climbs.size() && (pick -= std::max(climbs[mover].ratio, 0.0) + kFloorShare) > 0)
      ++mover;
    Climb& climb = climbs[mover];
    if (climb.stale >= kPatience) {  // restart from the next start, then from the best so far
      const auto& pool = st.starts[climb.use];
      climb.stale = 0;
      if (++climb.start < pool.size()) {
        climb.current = {pool[climb.start].c, st.bytes_of(pool[climb.start])};
        climb.ratio = pool[climb.start].ratio;
      } else {
        climb.start = 0;
        climb.current = climb.best;
        climb.ratio = climb.best_ratio;
      }
    }
    std::optional<Node> next = st.move(climb.current);
    if (!next) {
      ++sr.rejected;
      ++climb.stale;
      if (++rejected_in_a_row > kMaxRejectedPerCase * std::max<int64_t>(1, sr.budget)) break;
      continue;
    }
    rejected_in_a_row = 0;
    ++sr.cases;
    std::vector<const InvariantUse*> live_uses;
    for (const Climb& c : climbs) live_uses.push_back(st.uses[c.use]);
    const std::vector<CheckResult> results = check_uses(ctx, live_uses, next->c, ctx.options.compare_outputs);
    if (ctx.options.compare_outputs) count_compared_outputs(report, results);
    bool checked = false, improved = false, declined_or_stopped = false;
    std::vector<size_t> broken;
    for (size_t n = 0; n < results.size(); ++n) {
      Climb& c = climbs[n];
      const size_t k = c.use;
      InvariantReport& ir = report.invariants[k];
      SearchInvariant& si = sr.invariants[c.search];
      const CheckResult& r = results[n];
      if (r.kind == CheckResult::Kind::declined) {
        sr.declined += !r.reference_unavailable;  // the reference's loss ends the search below
        declined_or_stopped = true;
        if (r.unavailable) lost = r.reason;
        break;
      }
      if (r.kind == CheckResult::Kind::target_failure && r.failure_kind == "interrupted") {
        declined_or_stopped = true;
        break;
      }
      if (r.kind == CheckResult::Kind::target_failure) {
        report.status = RunStatus::crashed;
        report.crash = record_finding(
            found_ctx, st.uses[k], next->c, r,
            [&](int64_t from, int64_t to, double s) { events.shrinking(r.failure_kind, from, to, s); });
        events.failure(*report.crash);
        report.detail = report.crash->message;
        sr.seconds = since(t0);
        report.seconds = before + sr.seconds;
        return;
      }
      const Verdict& v = r.verdict;
      switch (v.outcome) {
        case Outcome::pass: {
          checked = true;
          ++si.passed;
          note_ratios(ir, v);
          const double ratio = ratio_of(v);
          si.worst_ratio = std::max(si.worst_ratio, ratio);
          for (const Measured& m : v.measured)
            if (is_output_ratio(m)) {
              auto [it, fresh] = si.output_ratios.emplace(output_of(m), m.value);
              if (!fresh) it->second = std::max(it->second, m.value);
            }
          if (ratio > c.ratio) {
            c.current = *next;
            c.ratio = ratio;
            c.stale = 0;
            ++si.improvements;
            if (ratio > c.best_ratio) c.best = *next, c.best_ratio = ratio;
            if (n == mover) improved = true;
          }
          break;
        }
        case Outcome::discard:
          ++si.discarded;
          break;
        case Outcome::not_applicable:
          break;
        case Outcome::fail:
          checked = true;
          si.failed = true;
          ir.status = InvariantStatus::failed;
          ir.trials_to_fail = report.trials + sr.cases;
          ir.seconds_to_fail = before + since(t0);
          ir.counterexample = record_finding(
              found_ctx, st.uses[k], next->c, r,
              [&](int64_t from, int64_t to, double s) { events.shrinking(ir.name, from, to, s); });
          events.failure(*ir.counterexample);
          report.status = RunStatus::failed;
          broken.push_back(n);
          break;
      }
    }
    if (!improved) ++climbs[mover].stale;
    sr.checked += checked;
    report.checked += checked;
    report.discarded += !checked && !declined_or_stopped;
    for (auto it = broken.rbegin(); it != broken.rend(); ++it) climbs.erase(climbs.begin() + long(*it));
    if (!broken.empty() && ctx.options.stop_on_first_failure && !climbs.empty()) {
      // --fail-fast: the other invariants passed the random cases; their climbs end here.
      report.stopped_at_failure = true;
      report.detail =
          fmt::format("the first counterexample ended the search: {} invariant(s) not searched to the end",
                      climbs.size());
      climbs.clear();
    }
    events.case_done(report.trials + sr.cases, sr.cases, sr.budget, 0, before + since(t0));
    if (lost) break;
  }
  sr.seconds = since(t0);
  report.seconds = before + sr.seconds;
  // Unavailable mid-search (a device lost): the search ends there, and the
  // run is no pass, as when it happens among the random cases (it said
  // PASSED over 100 search cases the target declined as unavailable).
  if (lost) end_unavailable(report, *lost, " during the search,");
}

void end_unavailable(RunReport& report, const std::string& lost, const char* phase) {
  report.detail = fmt::format("{} became unavailable{} after {} checked case(s): {}",
                              lost.rfind("the reference '", 0) == 0 ? "the reference" : "the target", phase,
                              report.checked, lost);
  if (report.status == RunStatus::passed) {
    report.status = RunStatus::gave_up;
    report.health.push_back({"unavailable", report.detail + "; the rest of the run was not checked"});
  }
}

}  // namespace kprop
