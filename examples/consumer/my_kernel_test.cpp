// A user's own GoogleTest binary: kprop runs specs/attention_fwd.yaml against the
// kernel linked into this test, through the same C ABI a plugin exports.
#include <kprop/testing.h>

// The kernel under test (examples/plugin/attention_fwd.cpp).
extern "C" int kprop_attention_fwd(const kprop_attention_fwd_args* args, char* error, size_t error_size);

TEST(MyKernels, FlashAttentionForward) {
  kprop::RunOptions options;
  options.trials = 200;
  options.corpus_dir = "kprop-corpus";  // shrunk counterexamples land here
  // The kernel takes f32 and f64: the run is narrowed to those (the dtypes it
  // declines would be half the run and fail the `declined` health check).
  KPROP_EXPECT_SPEC_PASSES(KPROP_SPEC_DIR "/attention_fwd.yaml",
                           {{"kprop_attention_fwd", reinterpret_cast<void*>(&kprop_attention_fwd)}}, options,
                           "{dtypes: [f32, f64]}");
}
