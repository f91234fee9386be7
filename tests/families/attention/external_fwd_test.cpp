// attention.fwd through the C ABI inside this test binary (kprop/testing.h):
// the example plugin's entry point, linked in, must pass specs/attention_fwd.yaml;
// the same code with its planted bug must not.
#include <gtest/gtest.h>

#include "kprop/testing.h"

namespace example {
#include "examples/plugin/attention_fwd.cpp"
}  // namespace example

namespace {

kprop::RunOptions quick() {
  kprop::RunOptions o;
  o.seed = 20261122;
  o.trials = 150;
  o.write_corpus = false;
  return o;
}

// The example takes f32 and f64 (it declines f16 and bf16): the run is
// narrowed to those, as a user narrows it for a kernel of theirs.
TEST(AttentionFwdExternal, ExamplePluginPassesInProcess) {
  KPROP_EXPECT_SPEC_PASSES(KPROP_SOURCE_DIR "/specs/attention_fwd.yaml",
                           {{"kprop_attention_fwd", reinterpret_cast<void*>(&example::kprop_attention_fwd)}},
                           quick(), "{dtypes: [f32, f64]}");
}

// A wrong entry point through the same path: outputs never written stay
// poisoned (NaN), so the spec must fail rather than read zeros.
int writes_nothing(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}

TEST(AttentionFwdExternal, UnwrittenOutputsFail) {
  const auto report = kprop::testing::run_in_process(
      KPROP_SOURCE_DIR "/specs/attention_fwd.yaml",
      {{"kprop_attention_fwd", reinterpret_cast<void*>(&writes_nothing)}}, quick());
  EXPECT_EQ(report.status, kprop::RunStatus::failed);
  EXPECT_FALSE(kprop::testing::spec_passes(report));
}

int refuses(const kprop_attention_fwd_args*, char* error, size_t size) {
  std::snprintf(error, size, "no f64 on this device");
  return KPROP_UNSUPPORTED;
}

TEST(AttentionFwdExternal, UnsupportedIsSkippedNotPassed) {
  const auto report =
      kprop::testing::run_in_process(KPROP_SOURCE_DIR "/specs/attention_fwd.yaml",
                                     {{"kprop_attention_fwd", reinterpret_cast<void*>(&refuses)}}, quick());
  EXPECT_EQ(report.status, kprop::RunStatus::skipped);
  EXPECT_NE(report.detail.find("no f64 on this device"), std::string::npos) << report.detail;
  // Asserting a pass on it fails: a skip is never green by accident.
  const auto asserted = kprop::testing::spec_passes(report);
  EXPECT_FALSE(asserted);
  EXPECT_NE(std::string(asserted.message()).find("skipped, not passed"), std::string::npos)
      << asserted.message();
}

TEST(AttentionFwdExternal, MissingEntryPointIsAnInputError) {
  EXPECT_THROW(kprop::testing::run_in_process(KPROP_SOURCE_DIR "/specs/attention_fwd.yaml", {}, quick()),
               kprop::InputError);
}

}  // namespace
