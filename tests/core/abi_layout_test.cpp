// The C ABI's structs are pinned to KPROP_ABI_VERSION: a plugin built
// against another layout must be refused at load (its version), never read
// at the wrong offsets. A struct once grew (kprop_op_attr gained `text`, 24
// to 32 bytes) with the version left at 1. When a size below changes, bump
// KPROP_ABI_VERSION in include/kprop/abi.h and update this table with it.
#include <gtest/gtest.h>
#include <kprop/abi.h>
#include <kprop/abi/attention.h>
#include <kprop/abi/beam.h>
#include <kprop/abi/dflash.h>
#include <kprop/abi/kvcache.h>
#include <kprop/abi/layernorm.h>
#include <kprop/abi/op.h>
#include <kprop/abi/softmax_topk.h>
#include <kprop/abi/ternary.h>

#include <cstddef>
#include <string>
#include <vector>

namespace {

struct Layout {
  std::string name;
  size_t size;
};

TEST(AbiLayout, EveryStructHasTheSizeOfItsAbiVersion) {
  ASSERT_EQ(KPROP_ABI_VERSION, 1) << "a new ABI version: update the sizes below with it";
  // x86-64 and aarch64 (LP64): 8-byte pointers and int64_t.
  static_assert(sizeof(void*) == 8, "the sizes below are LP64's");
  const std::vector<Layout> expected = {
      {"kprop_tensor", 120},
      {"kprop_attention_fwd_args", 864},
      {"kprop_attention_bwd_args", 1464},
      {"kprop_beam_step_args", 1704},
      {"kprop_dflash_tree_inputs_args", 488},
      {"kprop_dflash_verify_args", 600},
      {"kprop_kvcache_serve_args", 1344},
      {"kprop_layernorm_args", 1328},
      {"kprop_named_tensor", 128},
      {"kprop_op_attr", 32},
      {"kprop_op_args", 56},
      {"kprop_softmax_topk_args", 368},
      {"kprop_ternary_quantize_weights_args", 360},
      {"kprop_ternary_linear_args", 1200},
  };
  const std::vector<Layout> actual = {
      {"kprop_tensor", sizeof(kprop_tensor)},
      {"kprop_attention_fwd_args", sizeof(kprop_attention_fwd_args)},
      {"kprop_attention_bwd_args", sizeof(kprop_attention_bwd_args)},
      {"kprop_beam_step_args", sizeof(kprop_beam_step_args)},
      {"kprop_dflash_tree_inputs_args", sizeof(kprop_dflash_tree_inputs_args)},
      {"kprop_dflash_verify_args", sizeof(kprop_dflash_verify_args)},
      {"kprop_kvcache_serve_args", sizeof(kprop_kvcache_serve_args)},
      {"kprop_layernorm_args", sizeof(kprop_layernorm_args)},
      {"kprop_named_tensor", sizeof(kprop_named_tensor)},
      {"kprop_op_attr", sizeof(kprop_op_attr)},
      {"kprop_op_args", sizeof(kprop_op_args)},
      {"kprop_softmax_topk_args", sizeof(kprop_softmax_topk_args)},
      {"kprop_ternary_quantize_weights_args", sizeof(kprop_ternary_quantize_weights_args)},
      {"kprop_ternary_linear_args", sizeof(kprop_ternary_linear_args)},
  };
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_EQ(actual[i].size, expected[i].size)
        << actual[i].name << " changed size: bump KPROP_ABI_VERSION (include/kprop/abi.h) and this table";
}

}  // namespace
