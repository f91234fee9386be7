// The ternary family's one case builder.
#include <cmath>
#include <string>
#include <vector>

#include "kprop/rng.h"
#include "properties/ternary/family.h"

namespace kprop::ternary {

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
