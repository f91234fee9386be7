// Counter-based deterministic randomness for model weights and test data:
// the value at (seed, stream, index) never depends on evaluation order, so a
// model is fully defined by its seed and shape, and shrinking the shape keeps
// the surviving weights stable.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <utility>
#include <vector>

namespace kprop::rng {

inline uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t hash(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix(mix(mix(seed) ^ stream) ^ index);
}

// A hash of values fed in order, each 64-bit word mixed into the running
// state: what a family's Traits::content_hash builds over the fields its
// corpus files keep (FamilyDef::content_hash). A double by its bits, every
// NaN as one (the YAML codecs keep no payload; -0 they keep); a list by its
// length, then its items, so [1] [2, 3] and [1, 2] [3] differ.
class ContentHash {
 public:
  explicit ContentHash(uint64_t tag) : h_(tag) {}
  ContentHash& word(uint64_t w) {
    h_ = mix(h_ ^ w);
    return *this;
  }
  ContentHash& real(double v) {
    return word(std::isnan(v) ? 0x7ff8000000000000ULL : std::bit_cast<uint64_t>(v));
  }
  template <typename Range>
  ContentHash& reals(const Range& values) {
    return reals(values, [](double v) { return v; });
  }
  // Each value as the file keeps it, `kept(v)`: a codec that writes a value
  // rounded to the case's dtype keeps the rounded value, whatever the case
  // held (so the case and its stored copy hash the same).
  template <typename Range, typename Kept>
  ContentHash& reals(const Range& values, Kept kept) {
    word(static_cast<uint64_t>(std::size(values)));
    for (const double v : values) real(kept(v));
    return *this;
  }
  template <typename Range>
  ContentHash& words(const Range& values) {
    word(static_cast<uint64_t>(std::size(values)));
    for (const auto v : values) word(static_cast<uint64_t>(v));
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_;
};

// Uniform in [0, 1).
inline double uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<double>(hash(seed, stream, index) >> 11) * 0x1.0p-53;
}

// Standard normal (Box-Muller on two counter draws).
inline double normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = uniform(seed, stream, 2 * index) + 0x1.0p-54;
  const double u2 = uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Shuffles `v` in place: Fisher-Yates on the counter draws (seed, stream, i),
// so the same seed and stream give the same order (metamorphic transforms).
template <typename T>
void shuffle(std::vector<T>& v, uint64_t seed, uint64_t stream) {
  for (size_t i = v.size(); i-- > 1;)
    std::swap(v[i], v[static_cast<size_t>(hash(seed, stream, i) % (i + 1))]);
}

// 0, 1, ..., n-1 shuffled.
inline std::vector<int> permutation(size_t n, uint64_t seed, uint64_t stream) {
  std::vector<int> p(n);
  std::iota(p.begin(), p.end(), 0);
  shuffle(p, seed, stream);
  return p;
}

// A permutation of 0, 1, ..., n-1 that moves something (n >= 2; below, the
// identity, the only one), uniform over those: the shuffles of streams
// stream, stream + 1, ... until one is not the identity (each is with
// probability 1/n! <= 1/2). A metamorphic relation over the identity would
// compare a case with itself and observe nothing.
inline std::vector<int> moving_permutation(size_t n, uint64_t seed, uint64_t stream) {
  std::vector<int> p(n);
  for (uint64_t k = 0;; ++k) {
    std::iota(p.begin(), p.end(), 0);
    if (n < 2) return p;
    if (k == 64) {  // 2^-64 for n = 2: a swap rather than a loop without end
      std::swap(p[0], p[1]);
      return p;
    }
    shuffle(p, seed, stream + k);
    for (size_t i = 0; i < n; ++i)
      if (p[i] != static_cast<int>(i)) return p;
  }
}

}  // namespace kprop::rng
