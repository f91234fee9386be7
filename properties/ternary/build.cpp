// The ternary family's one case builder.
#include <cmath>
#include <string>
#include <vector>

#include "kprop/rng.h"
#include "properties/ternary/family.h"

namespace kprop::ternary {

namespace {
// The contract's rounding boundary of round_half_even(v * scale) (v >= 0,
// `up` > 0 an integer): the smallest v that rounds to `up` or more, if
// `above`, else the largest that rounds below it; `start` a few ulps from
// it. round(fl(v * scale)) never decreases as v grows, so stepping an ulp at
// a time finds it.
double on_boundary(double start, double scale, double up, bool above) {
  auto rounds_up = [&](double v) { return round_half_even(v * scale) >= up; };
  double v = start;
  for (int step = 0; step < 64 && rounds_up(v); ++step) v = std::nextafter(v, 0.0);
  for (int step = 0; step < 64 && !rounds_up(v); ++step) v = std::nextafter(v, HUGE_VAL);
  return above ? v : std::nextafter(v, 0.0);
}
}  // namespace

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
  const double saturated_rate = domain.real("saturated_rate");
  const bool saturated = same_sign && saturated_rate > 0 && draw.chance(saturated_rate);

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
    // Magnitudes in units of s/4 summing to 4 nw units, so mean|W| = s and
    // W (1/s) = m/4: m = 2 sits on the tie 1/2, m = 6 on 3/2.
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
    // Half the cases (stream 26) take s next to the drawn scale, no power of
    // two: 1/s is then inexact, and W (1/s) differs from W / s by an ulp now
    // and then, which only a weight on a rounding boundary shows.
    const bool general = uniform(26, 0) < 0.5 && wscale > 2 * kEps;
    if (!general) {
      // s a power of two: the sum is exact, W (1/s) = m/4 exactly, so m = 2
      // lands exactly on the tie. Half the cases nudge some entries by 2^-40
      // (near-ties instead of ties).
      const double s = std::exp2(std::round(wlog * 3.3219280948873622));
      const bool nudge = uniform(2, 0) < 0.5;
      for (size_t i = 0; i < nw; ++i) {
        double v = m[i] * s / 4 * (uniform(3, i) < 0.5 ? -1 : 1);
        if (nudge && uniform(4, i) < 0.3) v *= 1 + (uniform(5, i) < 0.5 ? -1 : 1) * 0x1p-40;
        c.w[i] = v;
      }
    } else {
      // s = fl(S / nw) with S = fl(nw scale) the sum the contract will
      // compute (the last entry absorbs the rounding of the others: below).
      // Each m = 2 (m = 6) entry is placed on the contract's own rounding
      // boundary at W (1/s) = 1/2 (3/2): the largest |W| that the contract's
      // round(W (1/s)) still rounds down, or the smallest it rounds up
      // (a coin each, stream 27): one of the two is on the tie exactly
      // whenever a double lands there, the other one ulp off it. The rest
      // keep m s / 4, so every mean, sign and magnitude stays as above.
      if (m[nw - 1] == 0)  // the last entry must be able to absorb a rounding (below)
        for (size_t j = 0; j + 1 < nw; ++j)
          if (m[j] > 0) {
            --m[j], ++m[nw - 1];
            break;
          }
      // The scale: the first double from the drawn one up whose reciprocal
      // is least exact, |s fl(1/s) - 1| >= 2^-54 (about 3 doubles in 10):
      // there the contract's W (1/s) and a W / s part most often (a kernel
      // dividing then rounds the boundary weights of about 4 scales in 10
      // the other way, against 1 in 8 at the other scales).
      double S = 0, s = 0, base = wscale;
      for (int step = 0; step < 32; ++step, base = std::nextafter(base, HUGE_VAL)) {
        S = static_cast<double>(nw) * base;
        s = std::max(S / static_cast<double>(nw), kEps);
        if (std::fabs(std::fma(s, 1.0 / s, -1.0)) >= 0x1p-54) break;
      }
      const double inv = 1.0 / s;
      double partial = 0;  // the contract's sum, in its order
      for (size_t i = 0; i + 1 < nw; ++i) {
        double v = m[i] * s / 4;
        if (m[i] == 2 || m[i] == 6) v = on_boundary(v, inv, m[i] == 2 ? 1 : 2, uniform(27, i) < 0.5);
        partial += v;
        c.w[i] = v * (uniform(3, i) < 0.5 ? -1 : 1);
      }
      // The last entry: the |W| for which the contract's running sum reaches
      // S exactly (a few ulps from m s / 4), so its mean|W| is s.
      double last = S - partial;
      for (int step = 0; step < 64 && partial + last < S; ++step) last = std::nextafter(last, S);
      for (int step = 0; step < 64 && partial + last > S && last > 0; ++step) last = std::nextafter(last, 0.0);
      c.w[nw - 1] = std::max(last, 0.0) * (uniform(3, nw - 1) < 0.5 ? -1 : 1);
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
      // max|x| = 127 u; x = (j + 1/2) u is a tie of x a_t, j u an integer.
      // Half the tokens (stream 28) take u a power of two: a_t = 1/u exactly
      // and x a_t = j + 1/2 exactly. Half of those move some ties by 2^-40
      // relative, as the weights' threshold kind does: x a_t = (j + 1/2)(1
      // ± 2^-40) is exact in double and rounds away from the tie, but an f32
      // product rounds it back onto the tie (an xq the contract's double
      // arithmetic never gives).
      // The other half take u = the token's drawn scale, no power of two:
      // a_t = 127 / fl(127 u) is inexact, and each tie is placed on the
      // contract's own rounding boundary of round(x a_t) near j + 1/2: the
      // largest |x| that still rounds to the lower integer or the smallest
      // that rounds to the upper one (a coin each, stream 29); one of the
      // two is on the tie exactly whenever a double lands there, the other
      // one ulp off it. A kernel that forms the product another way (x 127 /
      // max|x|, f32) rounds some of these the other way.
      const bool general = uniform(28, static_cast<uint64_t>(t)) < 0.5 && 127 * token_scale > 2 * kEps;
      const double u = general ? token_scale : std::exp2(std::round(std::log2(token_scale)));
      const size_t peak = static_cast<size_t>(uniform(14, static_cast<uint64_t>(t)) * K);
      const bool nudge = !general && uniform(22, static_cast<uint64_t>(t)) < 0.5;
      const double a = 127.0 / std::max(127 * u, kEps);  // the contract's a_t (max|x| = 127 u)
      for (int k = 0; k < K; ++k) {
        const uint64_t i = static_cast<uint64_t>(t) * K + static_cast<uint64_t>(k);
        const double j = std::floor(uniform(15, i) * 254) - 127;  // [-127, 126]
        const bool tie = uniform(17, i) < 0.8;
        row[k] = static_cast<size_t>(k) == peak ? (uniform(16, i) < 0.5 ? -127 : 127) * u
                 : tie                          ? (j + 0.5) * u
                                                : j * u;
        if (general && tie && static_cast<size_t>(k) != peak) {
          // |j + 1/2| = n + 1/2: the boundary between n and n + 1.
          const double n = j >= 0 ? j : -j - 1;
          row[k] = std::copysign(on_boundary((n + 0.5) * u, a, n + 1, uniform(29, i) < 0.5), j + 0.5);
        }
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
  if (saturated) {
    // A 16-bit accumulator's worst case: each |x| within [1/2, 1] of its
    // token's largest (every x_q in [64, 127]) and the weights of one
    // magnitude (every w_q = ±1), so each product adds 64 or more. A lane
    // holding 2 products of each 32-wide block then passes 32767 within 8192
    // elements (64 x 512 = 32768); |normal| activations averaged a product
    // of 14, and a kernel flushing its int16 lanes every 8192 elements passed.
    // (A zero row or zero weights, of the zero kinds, take the case's scale:
    // a case of zero products is no worst case.)
    for (int t = 0; t < M; ++t) {
      double* row = c.x.data() + static_cast<size_t>(t) * K;
      double most = 0;
      for (int k = 0; k < K; ++k) most = std::max(most, row[k]);
      if (most == 0) most = ascale;
      for (int k = 0; k < K; ++k)
        row[k] = most * (0.5 + 0.5 * uniform(25, static_cast<uint64_t>(t) * K + static_cast<uint64_t>(k)));
    }
    double mean = 0, sign = 1;
    for (const double v : c.w) mean += std::abs(v) / static_cast<double>(nw), sign = v < 0 ? -1 : sign;
    if (mean == 0) mean = wscale;
    for (double& v : c.w) v = sign * mean;
  }

  c.dy.resize(static_cast<size_t>(M) * N);
  for (size_t i = 0; i < c.dy.size(); ++i) c.dy[i] = normal(20, i);
  return c;
}

}  // namespace kprop::ternary
