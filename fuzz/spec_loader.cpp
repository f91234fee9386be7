// Fuzzes the spec loader with arbitrary text: every input must either load
// or be rejected with an InputError (one clear line). Any other exception,
// crash, hang or leak is a bug. Seeds: the committed specs (pass specs/ and
// specs/examples/, with expression invariants and transforms, as corpus directories).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kprop/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const kprop::Spec spec = kprop::parse_spec(text, "fuzz.yaml");
    (void)spec;
  } catch (const kprop::InputError& e) {
    const std::string message = e.what();
    if (message.empty() || message.find('\n') != std::string::npos) {
      std::fprintf(stderr, "spec loader error is not one line: [%s]\n", message.c_str());
      std::abort();
    }
  }
  return 0;
}
