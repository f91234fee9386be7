// Why cases were discarded or declined, as a reader wants them: one line per
// kind of reason, not one per case.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kprop {

// Reasons that differ only in their numbers ("softmax scale 1.35 is not a
// power of two", "softmax scale 1.41 ...") are one group: its text is the
// reasons' common text with each number that varies written "…", its count
// the sum. Largest count first, then by text. A function of the map alone,
// so the same counts (any --jobs) give the same groups.
std::vector<std::pair<std::string, int64_t>> grouped_reasons(const std::map<std::string, int64_t>& reasons);

// The groups as a map from text to count (JSON reports, Python).
std::map<std::string, int64_t> grouped_reason_counts(const std::map<std::string, int64_t>& reasons);

// The `most` largest groups on one line, "text (count), ...", and how many
// more there are.
std::string reasons_summary(const std::map<std::string, int64_t>& reasons, size_t most);

}  // namespace kprop
