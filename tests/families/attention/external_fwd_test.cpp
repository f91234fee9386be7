// attention.fwd through the C ABI inside this test binary (kprop/testing.h):
// the example plugin's entry point, linked in, must pass specs/attention_fwd.yaml;
// the same code with its planted bug must not.
#include <gtest/gtest.h>

#include <cstring>

#include "kprop/testing.h"

namespace example {
#include "examples/plugin/attention_fwd.cpp"
}  // namespace example

namespace {
// Named: in a unity batch (KPROP_UNITY) this file's helpers meet its
// neighbours', some of the same name.
namespace fwd_external {

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
// poisoned (0xFF bytes), so the call is an error rather than reading zeros
// (or a NaN where NaN is right).
int writes_nothing(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}

TEST(AttentionFwdExternal, UnwrittenOutputsFail) {
  const auto report = kprop::testing::run_in_process(
      KPROP_SOURCE_DIR "/specs/attention_fwd.yaml",
      {{"kprop_attention_fwd", reinterpret_cast<void*>(&writes_nothing)}}, quick());
  EXPECT_EQ(report.status, kprop::RunStatus::crashed);
  EXPECT_FALSE(kprop::testing::spec_passes(report));
  ASSERT_TRUE(report.crash);
  EXPECT_NE(report.crash->message.find("was never written"), std::string::npos) << report.crash->message;
}

// The example, correct, then one element written past the end of lse: the
// guard bytes after each output catch it (it passed, or corrupted the heap
// for a later case to crash on).
int writes_past_lse(const kprop_attention_fwd_args* args, char* error, size_t size) {
  const int status = example::kprop_attention_fwd(args, error, size);
  if (status != KPROP_OK) return status;
  int64_t n = 1;
  for (int d = 0; d < args->lse.ndim; ++d) n *= args->lse.shape[d];
  std::memset(static_cast<char*>(args->lse.data) + n * int64_t(kprop_dtype_size(args->lse.dtype)), 0,
              kprop_dtype_size(args->lse.dtype));
  return KPROP_OK;
}

TEST(AttentionFwdExternal, AWritePastAnOutputIsAnError) {
  const auto report = kprop::testing::run_in_process(
      KPROP_SOURCE_DIR "/specs/attention_fwd.yaml",
      {{"kprop_attention_fwd", reinterpret_cast<void*>(&writes_past_lse)}}, quick(), "{dtypes: [f32, f64]}");
  EXPECT_EQ(report.status, kprop::RunStatus::crashed);
  ASSERT_TRUE(report.crash);
  EXPECT_NE(report.crash->message.find("the target wrote past the end of output lse"), std::string::npos)
      << report.crash->message;
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

}  // namespace fwd_external
}  // namespace
