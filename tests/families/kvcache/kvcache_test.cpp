// KV cache: the kernels on hand-made batches, the int8 bound, the codec, the
// shrinker, and every mutant killed under the committed spec.
#include "kernels/kvcache/kvcache.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kprop/runner.h"
#include "properties/kvcache/family.h"
#include "tests/families/kvcache/three_sequences.h"
#include "tests/support/registered.h"
#include "tests/support/tensor_shapes.h"

namespace kprop::kvcache {
namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace kernels {

const std::string kSpec = std::string(KPROP_SOURCE_DIR) + "/specs/kvcache.yaml";

// The third sequence reuses blocks released by the first; chunks of 2.
Case batch_case() {
  return three_sequences(3, 2, kShuffledPool);
}

double max_error(const Result& a, const Result& b) {
  double worst = 0;
  for (size_t s = 0; s < a.out.size(); ++s)
    for (size_t i = 0; i < a.out[s].size(); ++i)
      worst = std::max(worst, std::fabs(a.out[s][i] - b.out[s][i]));
  return worst;
}

TEST(KvcacheKernels, OneTokenOutputIsItsValue) {
  Case c;
  c.head_dim = 3;
  c.seqs = {{1, 0, 0, 7}};
  c.pool = {0};
  const Tensors x = sequence_data(c, 0);
  const Result r = reference(c);
  for (size_t d = 0; d < 3; ++d) EXPECT_DOUBLE_EQ(r.out[0][d], x.v[d]);
}

TEST(KvcacheKernels, CachedImplementationsMatchTheReference) {
  const Case c = batch_case();
  ASSERT_EQ(validate(c), "");
  const Result want = reference(c);
  for (auto* impl : {contiguous, paged, chunked_prefill}) EXPECT_LT(max_error(impl(c), want), 1e-12);
}

TEST(KvcacheKernels, PagedReusesReleasedBlocks) {
  const Result r = paged(batch_case());
  EXPECT_GT(r.blocks_reused, 0);
  EXPECT_GT(r.blocks_allocated, r.blocks_reused);
}

TEST(KvcacheKernels, PoisonNeverReachesTheOutput) {
  Case c = batch_case();
  for (Poison p : {Poison::nan, Poison::huge}) {
    c.poison = p;
    for (auto* impl : {contiguous, paged, chunked_prefill, int8})
      for (const auto& seq : impl(c).out)
        for (double o : seq) ASSERT_TRUE(std::isfinite(o) && std::fabs(o) <= 1);
  }
}

TEST(KvcacheKernels, Int8EqualsTheDequantizedReferenceAndStaysNearFp64) {
  const Case c = batch_case();
  const Result q = int8(c);
  EXPECT_TRUE(q.int8_cache);
  EXPECT_LT(max_error(q, reference_dequantized(c)), 1e-12);
  const double err = max_error(q, reference(c));
  EXPECT_GT(err, 0);
  EXPECT_LT(err, 0.05);
}

TEST(KvcacheKernels, QuantizationIsWithinHalfAStep) {
  const Case c = batch_case();
  const ChannelRanges s = int8_scales(c), range = channel_ranges(c);
  for (size_t i = 0; i < s.k.size(); ++i) {
    EXPECT_DOUBLE_EQ(s.k[i] * 127, range.k[i]);
    for (double x : {-range.k[i], -0.3 * range.k[i], 0.0, 0.77 * range.k[i], range.k[i]})
      EXPECT_LE(std::fabs(quantize(x, s.k[i]) * s.k[i] - x), s.k[i] / 2 * (1 + 1e-12));
  }
  const ChannelRanges t = int8_scales(c, true);
  for (size_t i = 1; i < t.v.size(); ++i) EXPECT_EQ(t.v[i], t.v[0]);
}

TEST(KvcacheKernels, ScheduleChunksThePromptOnePerStep) {
  const auto w = schedule({5, 2, 3, 1}, 2);
  ASSERT_EQ(w.size(), 5u);
  EXPECT_EQ(w[0].step, 3);
  EXPECT_EQ(w[2].begin, 4);
  EXPECT_EQ(w[2].end, 5);
  EXPECT_EQ(w[4].step, 7);
  EXPECT_EQ(w[4].begin, 6);
  EXPECT_EQ(schedule({5, 0, 0, 1}, 0).size(), 1u);
}

TEST(KvcacheKernels, ValidateRejectsSmallOrBrokenPools) {
  Case c = batch_case();
  c.pool.clear();
  for (int b = 0; b + 1 < blocks_needed(c); ++b) c.pool.push_back(b);
  EXPECT_NE(validate(c), "");
  c.pool.push_back(static_cast<int>(c.pool.size()));
  EXPECT_EQ(validate(c), "");
  c = batch_case();
  c.pool[0] = c.pool[1];
  EXPECT_NE(validate(c), "");
  c = batch_case();
  c.seqs[0].prompt = 0;
  EXPECT_NE(validate(c), "");
  EXPECT_THROW(paged(c), std::invalid_argument);
}

// blocks_needed sweeps its schedule's work items; this counts what every
// sequence holds at every step, the definition, on generated cases.
int blocks_held_at_peak(const Case& c) {
  int peak = 0;
  for (int chunk : {0, c.chunk}) {
    const BatchSchedule batch(c.seqs, chunk);
    for (int step = 0; step <= batch.last_step(); ++step) {
      int held = 0;
      for (const auto& plan : batch.plans()) {
        if (step < plan.front().step || step > plan.back().step) continue;
        int len = 0;
        for (const Work& w : plan)
          if (w.step <= step) len = w.end;
        held += (len + c.page_size - 1) / c.page_size;
      }
      peak = std::max(peak, held);
    }
  }
  return peak;
}

TEST(KvcacheKernels, BlocksNeededIsThePeakHeldAtAnyStep) {
  const Spec spec = load_spec(kSpec);
  const auto gen = spec.family->generator(spec.domain);
  for (uint64_t i = 0; i < 200; ++i) {
    const AnyCase any = gen(rc::Random(i + 7), static_cast<int>(i % 100)).value();
    Case c = *static_cast<const Case*>(any.get());
    // Chunks of one and two tokens too: long runs of items per sequence.
    for (int chunk : {c.chunk, 1, 2}) {
      c.chunk = chunk;
      ASSERT_EQ(blocks_needed(c), blocks_held_at_peak(c)) << "case " << i << ", chunk " << chunk;
    }
  }
  EXPECT_EQ(blocks_needed(batch_case()), blocks_held_at_peak(batch_case()));
}

TEST(KvcacheCodec, BadCaseNamesLineAndColumn) {
  const YAML::Node n = YAML::Load(
      "heads: {kv: 1, group: 1}\nhead_dim: 1\nseqs:\n  - {prompt: 3, decode: 0, arrive: 0, seed: 1}\n"
      "page_size: 1\nchunk: 1\npool: [0, 1]\npoison: nan\ndata: {q_scale: 1, k_spread: 1, v_spread: 1, seed: "
      "1}\n");
  testing::expect_bad_case<Traits>(YAML::Dump(n), "pool");  // 2 blocks for 3 tokens of page 1
}

// The generator reaches what the mutants need: decodes, reuse of released
// blocks, pages that do and do not divide lengths, multi-chunk prompts.
TEST(KvcacheGenerator, CoversTheDomain) {
  const Spec spec = load_spec(kSpec);
  const auto gen = spec.family->generator(spec.domain);
  int reuse = 0, divides = 0, not_divides = 0, chunked = 0, decodes = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    const AnyCase any = gen(rc::Random(i + 1), static_cast<int>(i)).value();
    const Case& c = *static_cast<const Case*>(any.get());
    ASSERT_EQ(validate(c), "");
    reuse += paged(c).blocks_reused > 0;
    for (const Sequence& s : c.seqs) {
      (s.tokens() % c.page_size == 0 ? divides : not_divides)++;
      chunked += s.prompt > c.chunk;
      decodes += s.decode > 0;
    }
  }
  EXPECT_GT(reuse, 20);
  EXPECT_GT(divides, 20);
  EXPECT_GT(not_divides, 20);
  EXPECT_GT(chunked, 20);
  EXPECT_GT(decodes, 20);
}

// padding_leak needs two sequences decoding together at different lengths.
TEST(KvcacheShrinker, PaddingLeakShrinksToTwoSequences) {
  for (const Case& c : testing::shrunk_cases<Traits>(kSpec, "padding_leak", 3, {"sequence_independence"})) {
    EXPECT_EQ(c.seqs.size(), 2u);
    EXPECT_EQ(c.head_dim, 1);
  }
}

RunStatus run(const std::string& target, uint64_t seed, std::vector<std::string> only = {}) {
  return run_spec(load_spec(kSpec), testing::first_failure(target, seed, std::move(only))).status;
}

// Each mutant also dies under the invariant written for its kind of bug alone.
TEST(KvcacheMutants, EachDiesUnderItsOwnInvariant) {
  const std::vector<std::pair<const char*, const char*>> pairs = {
      {"paged_last_block_offset", "paged_matches_contiguous"},
      {"chunk_ignores_past", "chunked_matches_full_prefill"},
      {"decode_off_by_one", "decode_matches_prefill"},
      {"padding_leak", "sequence_independence"},
      {"per_tensor_scale", "int8_error_bound"},
      {"stale_block_reuse", "paged_matches_contiguous"}};
  for (const auto& [mutant, invariant] : pairs)
    EXPECT_EQ(run(mutant, 5, {invariant}), RunStatus::failed) << mutant << " under " << invariant;
}

}  // namespace kernels
}  // namespace
}  // namespace kprop::kvcache
