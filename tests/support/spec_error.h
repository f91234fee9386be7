// The loader's one-line error for a spec's text, for tests of what a spec
// may not say.
#pragma once

#include <string>

#include "kprop/errors.h"
#include "kprop/spec.h"

namespace kprop::testing {

// What parse_spec(text, file, profile, domain) throws as InputError; ""
// when the text loads.
inline std::string spec_load_error(const std::string& text, const std::string& file,
                                   const std::string& profile = "", const std::string& domain = "") {
  try {
    parse_spec(text, file, profile, domain);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace kprop::testing
