// Plugins that must be refused with a clear error (exit 2):
//   KPROP_TEST_BAD_VERSION  exports another ABI version;
//   KPROP_TEST_NO_ENTRY     exports the version but no kprop_attention_fwd.
#include <kprop/abi.h>

#ifdef KPROP_TEST_BAD_VERSION
KPROP_EXPORT uint32_t kprop_abi_version(void) {
  return KPROP_ABI_VERSION + 41;
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_NO_ENTRY
KPROP_PLUGIN();
KPROP_EXPORT int kprop_attention_fwd_v2(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif
