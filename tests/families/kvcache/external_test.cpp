// kvcache.serve through the C ABI (include/kprop/abi/kvcache.h): an engine
// written against the ABI alone, linked into this test, passes
// specs/kvcache.yaml and the same engine with a decode off-by-one does not;
// the NumPy worker (examples/python/kvcache_decode.py) passes, and each bug it
// can plant is caught. f32/f16/bf16 cases travel as those dtypes (q, out;
// k and v in f32): the in-process engine keeps its cache in the case's dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "kprop/half.h"
#include "kprop/spec.h"
#include "kprop/testing.h"
#include "tests/support/abi_entry.h"
#include "tests/support/python_worker.h"

namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace external {

using namespace kprop::testing;  // element, store, quick, has_counterexample (abi_entry.h)

const char* const kSpec = KPROP_SOURCE_DIR "/specs/kvcache.yaml";

template <typename T>
T& at(const kprop_tensor& t, std::initializer_list<int64_t> index) {
  return static_cast<T*>(t.data)[kprop_offset(&t, std::data(index))];
}

// x as a cache of `dtype` holds it.
double cached(int32_t dtype, double x) {
  switch (dtype) {
    case KPROP_F32:
      return static_cast<float>(x);
    case KPROP_F16:
      return kprop::half::round_to_f16(x);
    case KPROP_BF16:
      return kprop::half::round_to_bf16(x);
    default:
      return x;
  }
}

// A contiguous-cache engine: a padded [B][longest][Hkv][D] cache filled with
// the poison, whole-prompt prefill at each sequence's arrival, one decode
// token per step, writes before reads within a step, and a two-pass softmax
// per token over its cached keys, in double; the cache holds the case's
// dtype (q's) and outputs are rounded to it. kDecodeOffByOne plants the family's
// decode_off_by_one: a decode token attends to the cache before its own key.
template <bool kDecodeOffByOne>
int contiguous_engine(const kprop_kvcache_serve_args* a, char*, size_t) {
  struct Sequence {
    int64_t index, start, length, prompt, arrive;
    int64_t begin = 0, end = 0;  // the tokens of the current step
  };
  const int64_t B = a->prompt_lens.shape[0], Hq = a->q.shape[1], Hkv = a->k.shape[1], D = a->k.shape[2];
  const int64_t group = Hq / Hkv;
  std::vector<Sequence> seqs;
  int64_t longest = 0, last_step = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = at<int32_t>(a->seq_starts, {b}), end = at<int32_t>(a->seq_starts, {b + 1});
    seqs.push_back({b, start, end - start, at<int32_t>(a->prompt_lens, {b}), at<int32_t>(a->arrivals, {b})});
    longest = std::max(longest, end - start);
    last_step = std::max(last_step, seqs.back().arrive + seqs.back().length - seqs.back().prompt);
  }
  const bool nan = a->poison == KPROP_KVCACHE_POISON_NAN;
  const int32_t dtype = a->q.dtype;
  const double huge = dtype == KPROP_F16 ? kprop::half::f16_max : cached(dtype, 1e30);
  std::vector<double> k_cache(static_cast<size_t>(B * longest * Hkv * D),
                              nan ? std::numeric_limits<double>::quiet_NaN() : 0.0);
  std::vector<double> v_cache(k_cache.size(), nan ? std::numeric_limits<double>::quiet_NaN() : huge);
  std::vector<double> scores_buffer(static_cast<size_t>(longest));
  double* scores = scores_buffer.data();
  const auto slot = [&](std::vector<double>& cache, const Sequence& s, int64_t t, int64_t h) {
    return cache.data() + ((s.index * longest + t) * Hkv + h) * D;
  };
  for (int64_t step = 0; step <= last_step; ++step) {
    for (Sequence& s : seqs) {  // the whole prompt at arrival, then one token per step
      const int64_t decoded = step - s.arrive - 1 + s.prompt;
      s.begin = s.end = 0;
      if (step == s.arrive) s.end = s.prompt;
      if (step > s.arrive && decoded < s.length) s.begin = decoded, s.end = decoded + 1;
      for (int64_t t = s.begin; t < s.end; ++t)
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t d = 0; d < D; ++d) {
            slot(k_cache, s, t, h)[d] = cached(dtype, element(a->k, {s.start + t, h, d}));
            slot(v_cache, s, t, h)[d] = cached(dtype, element(a->v, {s.start + t, h, d}));
          }
    }
    for (const Sequence& s : seqs)
      for (int64_t t = s.begin; t < s.end; ++t) {
        const int64_t seen = kDecodeOffByOne && t >= s.prompt ? t : t + 1;
        for (int64_t h = 0; h < Hq; ++h) {
          double top = -std::numeric_limits<double>::infinity(), sum = 0;
          for (int64_t j = 0; j < seen; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += element(a->q, {s.start + t, h, d}) * slot(k_cache, s, j, h / group)[d];
            scores[j] = a->scale * dot;
            top = std::max(top, scores[j]);
          }
          for (int64_t j = 0; j < seen; ++j) sum += scores[j] = std::exp(scores[j] - top);
          for (int64_t d = 0; d < D; ++d) {
            double o = 0;
            for (int64_t j = 0; j < seen; ++j) o += scores[j] / sum * slot(v_cache, s, j, h / group)[d];
            store(a->out, {s.start + t, h, d}, o);
          }
        }
      }
  }
  at<int32_t>(a->cache_dtype, {0}) = dtype;
  return KPROP_OK;
}

TEST(KvcacheExternal, ContiguousEnginePassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(
      kSpec, {{"kprop_kvcache_serve", reinterpret_cast<void*>(&contiguous_engine<false>)}}, quick(false, 60));
}

TEST(KvcacheExternal, DecodeOffByOneFailsInProcess) {
  const auto report = kprop::testing::run_in_process(
      kSpec, {{"kprop_kvcache_serve", reinterpret_cast<void*>(&contiguous_engine<true>)}}, quick(false, 60));
  EXPECT_EQ(report.status, kprop::RunStatus::failed);
  EXPECT_TRUE(has_counterexample(report));
}

// The NumPy worker through the exec: protocol.
// `f64_only`: the committed spec with its domain narrowed to f64 cases (the
// int8 cache declines the others), parsed in memory.
kprop::RunReport run_worker(const std::string& flags, kprop::RunOptions options, bool f64_only = false) {
  options.target = kprop_test::python_worker("kvcache_decode.py", flags);
  if (!f64_only) return kprop::run_spec(kprop::load_spec(kSpec), options);
  std::ifstream in(kSpec);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const std::string line = "dtypes: [f64, f32, f16, bf16]";
  const size_t at = s.find(line);
  EXPECT_NE(at, std::string::npos);
  if (at != std::string::npos) s.replace(at, line.size(), "dtypes: [f64]");
  return kprop::run_spec(kprop::parse_spec(s, "kvcache_f64.yaml"), options);
}

TEST(KvcacheExternal, PythonWorkerPasses) {
  KPROP_REQUIRE_PYTHON();
  for (const char* flags : {"", "--int8"}) {
    const auto report = run_worker(flags, quick(false, 25), std::string(flags) == "--int8");
    EXPECT_TRUE(kprop::testing::spec_passes(report)) << "flags: " << flags;
    EXPECT_EQ(report.status, kprop::RunStatus::passed) << report.detail;  // not skipped
  }
}

TEST(KvcacheExternal, PythonWorkerBugsFail) {
  KPROP_REQUIRE_PYTHON();
  for (const char* bug : {"paged_last_block_offset", "chunk_ignores_past", "decode_off_by_one",
                          "padding_leak", "per_tensor_scale", "int8_round_half_away", "stale_block_reuse",
                          "cache_truncated_bf16", "decode_accumulate_in_storage"}) {
    kprop::RunOptions o = quick(false, 100);
    o.stop_on_first_failure = true;
    const auto report = run_worker(std::string("--bug ") + bug, o);
    EXPECT_EQ(report.status, kprop::RunStatus::failed) << bug;
    EXPECT_TRUE(has_counterexample(report)) << bug;
  }
}

}  // namespace external
}  // namespace
