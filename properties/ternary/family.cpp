#include "properties/ternary/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "kprop/case_yaml.h"
#include "kprop/rng.h"
#include "kprop/select.h"

namespace kprop::ternary {

namespace {
const std::vector<std::string> kWeightKinds = {"normal",    "uniform", "zero",  "outlier",
                                               "threshold", "tiny",    "sparse"};
const std::vector<std::string> kActivationKinds = {"normal", "outlier", "zero_rows", "ties"};
}  // namespace

Schema Traits::domain_schema() {
  return {
      field::int_range("tokens", {1, 6}, 1, 1 << 24,
                       "M: tokens (rows of x), each with its own activation scale"),
      field::int_range("in_features", {1, 70}, 1, 1 << 24,
                       "K: input features (not a multiple of 4 or 5 most of the time)"),
      field::int_range("out_features", {1, 12}, 1, 1 << 24, "N: output features (rows of W)"),
      field::map(
          "weights",
          {
              field::choices(
                  "kinds", kWeightKinds, kWeightKinds,
                  "latent weight distributions: normal, uniform, zero (all zero), outlier (one huge entry), "
                  "threshold (|W|/s on the 1/2 rounding threshold, exact ties or one ulp-scale off), "
                  "tiny (mean|W| around eps), sparse (most entries exactly zero)"),
              field::real_range("log10_scale", {-3, 3}, -9, 9, "log10 of the weights' magnitude"),
              field::real_range("log10_outlier", {3, 8}, 0, 11,
                                "log10 of the outlier's factor over the rest"),
          },
          "latent weights W"),
      field::map(
          "activations",
          {
              field::choices(
                  "kinds", kActivationKinds, kActivationKinds,
                  "activation distributions: normal (per-token magnitudes spread over two decades), "
                  "outlier (one huge channel, as in LLM activations), zero_rows (all-zero tokens), "
                  "ties (x a_t exactly halfway between integers, or 2^-40 off it)"),
              field::real_range("log10_scale", {-3, 3}, -9, 9, "log10 of the activations' magnitude"),
              field::real_range("log10_outlier", {2, 6}, 0, 11, "log10 of the outlier channel's factor"),
          },
          "activations x"),
      field::real(
          "same_sign_rate", 0, 0, 1,
          "probability a case's activations are all >= 0 (post-ReLU) and its weights all of one sign: "
          "then the integer product grows with K (up to 127 K: past an int16 accumulator from K = 259; "
          "profile large); 0 draws nothing for it, so the default cases stay what they were"),
  };
}

// One case builder for RapidCheck draws, fuzz bytes and seed corpora: the
// draws pick the shape, the distributions and a seed; the values come from the
// counter-based rng, so the same draws give the same case everywhere.
Case Traits::build(Draw& draw, const Values& domain) {
  Case c;
  c.tokens = static_cast<int>(draw.sized(domain.int_range("tokens")));
  c.in_features = static_cast<int>(draw.sized(domain.int_range("in_features")));
  c.out_features = static_cast<int>(draw.sized(domain.int_range("out_features")));
  const std::string wkind = draw.pick(domain.choices("weights.kinds"));
  const std::string akind = draw.pick(domain.choices("activations.kinds"));
  const double wlog = draw.any(domain.real_range("weights.log10_scale"));
  const double alog = draw.any(domain.real_range("activations.log10_scale"));
  const double wout = std::pow(10.0, draw.any(domain.real_range("weights.log10_outlier")));
  const double aout = std::pow(10.0, draw.any(domain.real_range("activations.log10_outlier")));
  const auto seed = static_cast<uint64_t>(draw.any(IntRange{1, 1 << 30}));
  // Drawn only when the domain asks for it: a rate of 0 leaves the draws, and
  // so every case of a seed, as they were before the key existed.
  const double same_sign_rate = domain.real("same_sign_rate");
  const bool same_sign = same_sign_rate > 0 && draw.chance(same_sign_rate);

  const int M = c.tokens, K = c.in_features, N = c.out_features;
  auto uniform = [seed](uint64_t stream, uint64_t i) { return rng::uniform(seed, stream, i); };
  auto normal = [seed](uint64_t stream, uint64_t i) { return rng::normal(seed, stream, i); };
  auto index = [&](uint64_t stream, size_t n) {
    return static_cast<size_t>(uniform(stream, 0) * static_cast<double>(n));
  };

  // Weights.
  const size_t nw = static_cast<size_t>(N) * K;
  const double wscale = std::pow(10.0, wlog);
  c.w.assign(nw, 0.0);
  if (wkind == "threshold") {
    // Magnitudes in units of s/4 summing to 4 nw units, s a power of two: then
    // mean|W| = s and W/s = m/4 exactly, so m = 2 sits exactly on the tie 1/2.
    // Half the cases nudge some entries by 2^-40 (near-ties instead of ties).
    const double s = std::exp2(std::round(wlog * 3.3219280948873622));
    const int pool[] = {0, 1, 2, 2, 2, 2, 3, 4, 5, 6, 8};
    std::vector<int> m(nw);
    long total = 0;
    for (size_t i = 0; i < nw; ++i) total += m[i] = pool[static_cast<size_t>(uniform(1, i) * 11)];
    for (size_t i = 0; total != 4 * static_cast<long>(nw); i = (i + 1) % nw) {
      if (total < 4 * static_cast<long>(nw))
        ++m[i], ++total;
      else if (m[i] > 0)
        --m[i], --total;
    }
    const bool nudge = uniform(2, 0) < 0.5;
    for (size_t i = 0; i < nw; ++i) {
      double v = m[i] * s / 4 * (uniform(3, i) < 0.5 ? -1 : 1);
      if (nudge && uniform(4, i) < 0.3) v *= 1 + (uniform(5, i) < 0.5 ? -1 : 1) * 0x1p-40;
      c.w[i] = v;
    }
  } else if (wkind != "zero") {
    const double tiny = std::pow(10.0, -9 + 4 * uniform(6, 0));  // mean|W| from 1e-9 to 1e-5
    for (size_t i = 0; i < nw; ++i) {
      if (wkind == "uniform")
        c.w[i] = (2 * uniform(7, i) - 1) * wscale;
      else if (wkind == "tiny")
        c.w[i] = normal(8, i) * tiny;
      else if (wkind == "sparse")
        c.w[i] = uniform(9, i) < 0.7 ? 0.0 : normal(8, i) * wscale;
      else
        c.w[i] = normal(8, i) * wscale;
    }
    if (wkind == "outlier") c.w[index(10, nw)] *= wout;
  }

  // Activations.
  c.x.assign(static_cast<size_t>(M) * K, 0.0);
  const double ascale = std::pow(10.0, alog);
  const size_t channel = index(11, static_cast<size_t>(K));
  const size_t zero_row = index(12, static_cast<size_t>(M));
  for (int t = 0; t < M; ++t) {
    double* row = c.x.data() + static_cast<size_t>(t) * K;
    const double token_scale = ascale * std::pow(10.0, 2 * uniform(13, static_cast<uint64_t>(t)) - 1);
    if (akind == "ties") {
      // max|x| = 127 u with u a power of two: a_t = 1/u exactly, and x = (j + 1/2) u lands on a tie.
      // Half the tokens move some ties by 2^-40 relative, as the weights'
      // threshold kind does: x a_t = (j + 1/2)(1 ± 2^-40) is exact in
      // double and rounds away from the tie, but an f32 product rounds it
      // back onto the tie (an xq the contract's double arithmetic never gives).
      const double u = std::exp2(std::round(std::log2(token_scale)));
      const size_t peak = static_cast<size_t>(uniform(14, static_cast<uint64_t>(t)) * K);
      const bool nudge = uniform(22, static_cast<uint64_t>(t)) < 0.5;
      for (int k = 0; k < K; ++k) {
        const uint64_t i = static_cast<uint64_t>(t) * K + static_cast<uint64_t>(k);
        const double j = std::floor(uniform(15, i) * 254) - 127;  // [-127, 126]
        row[k] = static_cast<size_t>(k) == peak ? (uniform(16, i) < 0.5 ? -127 : 127) * u
                 : uniform(17, i) < 0.8         ? (j + 0.5) * u
                                                : j * u;
        if (nudge && static_cast<size_t>(k) != peak && uniform(23, i) < 0.3)
          row[k] *= 1 + (uniform(24, i) < 0.5 ? -1 : 1) * 0x1p-40;
      }
      continue;
    }
    if (akind == "zero_rows" &&
        (static_cast<size_t>(t) == zero_row || uniform(18, static_cast<uint64_t>(t)) < 0.3))
      continue;
    for (int k = 0; k < K; ++k)
      row[k] = normal(19, static_cast<uint64_t>(t) * K + static_cast<uint64_t>(k)) * token_scale;
    if (akind == "outlier") row[channel] *= aout;
  }

  if (same_sign) {
    // |x| and ±|W| keep every kind's magnitudes (ties stay ties, thresholds
    // thresholds) and make every product x_q w_q of one sign.
    const double sign = uniform(21, 0) < 0.5 ? -1 : 1;
    for (double& v : c.x) v = std::abs(v);
    for (double& v : c.w) v = sign * std::abs(v);
  }

  c.dy.resize(static_cast<size_t>(M) * N);
  for (size_t i = 0; i < c.dy.size(); ++i) c.dy[i] = normal(20, i);
  return c;
}

namespace {

// Shape edits: keep a subset of tokens, output rows or input columns.
Case keep_tokens(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.tokens = static_cast<int>(keep.size());
  s.x = select::rows(c.x, static_cast<size_t>(c.in_features), keep);
  s.dy = select::rows(c.dy, static_cast<size_t>(c.out_features), keep);
  return s;
}

Case keep_outputs(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.out_features = static_cast<int>(keep.size());
  s.w = select::rows(c.w, static_cast<size_t>(c.in_features), keep);
  s.dy = select::cols(c.dy, static_cast<size_t>(c.out_features), keep);
  return s;
}

Case keep_inputs(const Case& c, const std::vector<int>& keep) {
  Case s = c;
  s.in_features = static_cast<int>(keep.size());
  s.x = select::cols(c.x, static_cast<size_t>(c.in_features), keep);
  s.w = select::cols(c.w, static_cast<size_t>(c.in_features), keep);
  return s;
}

// The weight edit `s` of `from` with mean|W| kept: the largest remaining |w|
// absorbs the change, so W/s stays put for the other weights and a rounding
// tie on W/s = 1/2 survives dropping rows or columns of W.
std::optional<Case> keep_weight_mean(const Case& from, Case s) {
  if (s.w.empty()) return std::nullopt;
  double before = 0, after = 0;
  for (double v : from.w) before += std::fabs(v);
  for (double v : s.w) after += std::fabs(v);
  const size_t j =
      static_cast<size_t>(std::max_element(s.w.begin(), s.w.end(),
                                           [](double a, double b) { return std::fabs(a) < std::fabs(b); }) -
                          s.w.begin());
  const double need = before / static_cast<double>(from.w.size()) * static_cast<double>(s.w.size()) -
                      (after - std::fabs(s.w[j]));
  if (!(need >= 0) || !std::isfinite(need) || need == std::fabs(s.w[j])) return std::nullopt;
  s.w[j] = s.w[j] < 0 ? -need : need;
  return s;
}

using select::iota_except;

// Candidates for one value, simplest first: 0, 1 with its sign, then the
// value rounded to 1, 2 and 3 significant digits.
std::vector<double> simpler_values(double v) {
  std::vector<double> out;
  if (v == 0) return out;
  out.push_back(0);
  if (std::fabs(v) != 1) out.push_back(v < 0 ? -1 : 1);
  for (int digits = 1; digits <= 3; ++digits) {
    const double p = std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
    const double r = std::round(v * p) / p;
    if (r != v && r != 0 && std::fabs(r) != 1 && std::find(out.begin(), out.end(), r) == out.end())
      out.push_back(r);
  }
  return out;
}

}  // namespace

// One shrink step, boldest first: halve then drop single tokens, output rows
// and input columns; set nonzero dy to 1; then simplify single values (x, w,
// dy) to 0, +-1 or fewer significant digits. Every edit strictly simplifies
// (fewer values, or a value lower in 0 < +-1 < fewer digits), so shrinking
// ends. Built lazily: value candidates are only made when no shape edit fails.
rc::Seq<Case> Traits::shrinks(const Case& c, const Values&) {
  // Each shape edit drops [lo, hi) along one axis; its case is made when
  // the shrinker asks for it (every edit made at once held O(K²) indices and
  // a case per column: gigabytes at K = 16385, bad_alloc past it).
  struct Drop {
    int axis, lo, hi;
  };
  std::vector<Drop> drops;
  const int dims[] = {c.tokens, c.out_features, c.in_features};
  for (int axis = 0; axis < 3; ++axis) {
    const int n = dims[axis];
    if (n <= 1) continue;
    drops.push_back({axis, n / 2, n});
    drops.push_back({axis, 0, n / 2});
    for (int i = 0; i < n; ++i) drops.push_back({axis, i, i + 1});
  }
  auto apply = [c, dims_n = std::array<int, 3>{dims[0], dims[1], dims[2]}](const Drop& d) {
    const std::vector<int> keep = iota_except(dims_n[static_cast<size_t>(d.axis)], d.lo, d.hi);
    return d.axis == 0 ? keep_tokens(c, keep) : d.axis == 1 ? keep_outputs(c, keep) : keep_inputs(c, keep);
  };
  // Axes 1 and 2 again, mean|W| kept.
  std::vector<Drop> weight_drops;
  for (const Drop& d : drops)
    if (d.axis != 0) weight_drops.push_back(d);
  auto shape_seq = rc::seq::map(rc::seq::fromContainer(drops), apply);
  auto mean_kept = rc::seq::mapMaybe(rc::seq::fromContainer(std::move(weight_drops)),
                                     [c, apply](const Drop& d) -> rc::Maybe<Case> {
                                       std::optional<Case> s = keep_weight_mean(c, apply(d));
                                       if (!s) return rc::Nothing;
                                       return rc::Maybe<Case>(std::move(*s));
                                     });
  // Nonzero dy all set to 1 (zeros stay: 0 is simpler than 1, and undoing a
  // zeroing would let the shrinker cycle).
  std::vector<Case> ones;
  if (std::any_of(c.dy.begin(), c.dy.end(), [](double g) { return g != 0 && g != 1; })) {
    Case s = c;
    for (double& g : s.dy) g = g == 0 ? 0.0 : 1.0;
    ones.push_back(std::move(s));
  }
  // Every (array, index) pair, then each simpler value for it.
  const size_t total = c.x.size() + c.w.size() + c.dy.size();
  auto values_seq = rc::seq::mapcat(rc::seq::range<size_t>(0, total), [c](size_t i) {
    auto field = [](Case& s, size_t i) -> double& {
      if (i < s.x.size()) return s.x[i];
      i -= s.x.size();
      if (i < s.w.size()) return s.w[i];
      return s.dy[i - s.w.size()];
    };
    Case copy = c;
    const double v = field(copy, i);
    return rc::seq::map(rc::seq::fromContainer(simpler_values(v)), [c, i, field](double r) {
      Case s = c;
      field(s, i) = r;
      return s;
    });
  });
  return rc::seq::filter(rc::seq::concat(std::move(shape_seq), std::move(mean_kept),
                                         rc::seq::fromContainer(std::move(ones)), std::move(values_seq)),
                         [c](const Case& s) { return !(s == c); });
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  return first_problem({outside_int_range(d, "tokens", c.tokens),
                        outside_int_range(d, "in_features", c.in_features),
                        outside_int_range(d, "out_features", c.out_features)});
}

namespace {
// Doubles of one trial: x, W, dy; three results (target, reference, the
// dense gradients: w_q, dW of N×K, x_q, dx of M×K, acc, y of M×N) and the
// dequantized x~, W~ of the STE check.
double ternary_bytes(double m, double k, double n) {
  return 8 * ((m * k + n * k + m * n) + 3 * (2 * n * k + 2 * m * k + 2 * m * n + m) + m * k + n * k);
}
}  // namespace

double Traits::case_bytes(const Case& c) {
  return ternary_bytes(c.tokens, c.in_features, c.out_features);
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t m = d.int_range("tokens").hi, k = d.int_range("in_features").hi,
                n = d.int_range("out_features").hi;
  CaseSize size{ternary_bytes(double(m), double(k), double(n)),
                fmt::format("tokens {} x in {} x out {}", m, k, n), "tokens, in_features or out_features"};
  size.extents = {
      {"M", double(m)}, {"K", double(k)}, {"N", double(n)}};  // the named tensors' dims (tensors.cpp)
  return size;
}

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["tokens"] = c.tokens;
  n["in_features"] = c.in_features;
  n["out_features"] = c.out_features;
  n["x"] = case_yaml::real_list(c.x);
  n["w"] = case_yaml::real_list(c.w);
  n["dy"] = case_yaml::real_list(c.dy);
  return n;
}

Case Traits::from_yaml(const YAML::Node& n) {
  case_yaml::expect_keys(n, {"tokens", "in_features", "out_features", "x", "w", "dy"}, "ternary case");
  Case c;
  c.tokens = case_yaml::read<int>(n, "tokens");
  c.in_features = case_yaml::read<int>(n, "in_features");
  c.out_features = case_yaml::read<int>(n, "out_features");
  c.x = case_yaml::read_reals(n, "x");
  c.w = case_yaml::read_reals(n, "w");
  c.dy = case_yaml::read_reals(n, "dy");
  case_yaml::check_contract(n, validate(c));
  return c;
}

CaseStats Traits::stats(const Case& c) {
  auto nonzero = [](const std::vector<double>& v) {
    return std::count_if(v.begin(), v.end(), [](double e) { return e != 0; });
  };
  return CaseStats{
      static_cast<int64_t>(c.x.size() + c.w.size() + c.dy.size()),
      fmt::format("tokens {}, in_features {}, out_features {} (x {}/{} nonzero, w {}/{} nonzero)", c.tokens,
                  c.in_features, c.out_features, nonzero(c.x), c.x.size(), nonzero(c.w), c.w.size())}
      .dim("tokens", c.tokens)
      .dim("in features", c.in_features)
      .dim("out features", c.out_features);
}

}  // namespace kprop::ternary
