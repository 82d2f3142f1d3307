// `s` as a JSON string literal, quotes included: '"' and '\' escaped, '\n'
// as \n, other control characters as \u00XX. For the hand-written JSON of
// psbench, psctl trace and the GPU check.
#ifndef COMMON_JSON_STRING_H_
#define COMMON_JSON_STRING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ps {

std::string JsonString(absl::string_view s);

}  // namespace ps

#endif  // COMMON_JSON_STRING_H_
