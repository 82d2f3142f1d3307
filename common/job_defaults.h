// Moved to common/defaults.h (one header for every default); kept so that
// the includes of server/ and core/ still build until they name it directly.
#ifndef COMMON_JOB_DEFAULTS_H_
#define COMMON_JOB_DEFAULTS_H_

#include "common/defaults.h"  // IWYU pragma: export

#endif  // COMMON_JOB_DEFAULTS_H_
