// Parsing YAML text that holds one document, with one-line errors.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace kprop {

// The text's one YAML document (null when the text is empty). Throws
// InputError at source:line:col on a parse error, prefixed by `what`
// ("invalid YAML", "corrupt corpus file"), and on a second non-empty
// document (after ---), which a loader taking the first would ignore:
// "a second YAML document; <holder> holds one".
YAML::Node load_one_document(const std::string& text, const std::string& source, const std::string& what,
                             const std::string& holder);

}  // namespace kprop
