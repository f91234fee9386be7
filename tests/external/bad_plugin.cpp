// Plugins that must be refused with a clear error (exit 2):
//   KPROP_TEST_BAD_VERSION  exports another ABI version;
//   KPROP_TEST_NO_ENTRY     exports the version but no kprop_attention_fwd
//                           (it has one without extern "C": C++-mangled).
// One that prints while it loads and is probed (KPROP_TEST_CHATTY: a
// constructor and kprop_op_device print to stdout): the report on stdout
// stays clean (--format json parses).
// Ones that fail while they load, which must not take the runner down (it
// loads them in the plugin host, never in its own process):
//   KPROP_TEST_CTOR_CRASH   a constructor that aborts: exit 2, the death said;
//   KPROP_TEST_CTOR_HANG    a constructor that never returns: SIGTERM stops
//                           the run at once (exit 130), the host killed.
//   KPROP_TEST_TOUCHES_ITSELF  a kernel that touches its own .so, as a rebuild
//                           would, then aborts: the restarted host refuses
//                           the changed file (exit 2), no finding recorded.
// And one whose error must be reported as its error (exit 3, the message kept):
//   KPROP_TEST_LATIN1_ERROR fails every call with a message that is not UTF-8
//                           (Latin-1 "café"), which killed the plugin host.
#include <dlfcn.h>
#include <fcntl.h>
#include <kprop/abi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef KPROP_TEST_BAD_VERSION
KPROP_EXPORT uint32_t kprop_abi_version(void) {
  return KPROP_ABI_VERSION + 41;
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_LATIN1_ERROR
KPROP_PLUGIN();
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char* error, size_t size) {
  std::strncpy(error, "caf\xe9 failed", size);
  return KPROP_ERROR;
}
#endif

#ifdef KPROP_TEST_NO_ENTRY
KPROP_PLUGIN();
KPROP_EXPORT int kprop_attention_fwd_v2(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
// The entry point's name without extern "C" (KPROP_EXPORT forgotten): the
// file has it only C++-mangled, which the error points out.
__attribute__((visibility("default"))) int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_CHATTY
KPROP_PLUGIN();
__attribute__((constructor)) static void chatty_loaded() {
  std::printf("chatty plugin loaded\n");
}
KPROP_EXPORT int32_t kprop_op_device(const char* op) {
  std::printf("chatty device query for %s\n", op);
  return KPROP_HOST;
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_UNSUPPORTED;
}
#endif

#if defined(KPROP_TEST_CTOR_CRASH) || defined(KPROP_TEST_CTOR_HANG)
KPROP_PLUGIN();
__attribute__((constructor)) static void fail_on_load() {
#ifdef KPROP_TEST_CTOR_CRASH
  std::fprintf(stderr, "ctor_crash plugin: aborting while it loads\n");
  std::abort();
#else
  for (;;) pause();
#endif
}
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  return KPROP_OK;
}
#endif

#ifdef KPROP_TEST_TOUCHES_ITSELF
KPROP_PLUGIN();
KPROP_EXPORT int kprop_attention_fwd(const kprop_attention_fwd_args*, char*, size_t) {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&kprop_attention_fwd), &self) && self.dli_fname) {
    const timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};  // mtime: 2033
    utimensat(AT_FDCWD, self.dli_fname, later, 0);
  }
  std::abort();
}
#endif
