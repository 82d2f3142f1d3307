// Where a daemon's threads run: the core set of PsdConfig.cpu_cores and
// WorkerdConfig.cpu_cores ("0-3,6": a Linux cpulist), parsed, checked
// against the cores this process may use, and applied to the whole process
// before it starts threads; and the names of WorkerdConfig.cpu_kernels.
//
//   absl::StatusOr<std::vector<int>> cores =
//       ParseCpuCores("cpu_cores", "0,2-3", AllowedCores());
//   PS_RETURN_IF_ERROR(PinProcessToCores(*cores));
//
// Threads inherit the set: gRPC's, the loaders', oneDNN's OpenMP team and
// OpenBLAS's pool when they start after the call (OpenBLAS with one thread
// per device, the default, computes on the calling thread anyway).

#ifndef COMMON_CPU_PLACEMENT_H_
#define COMMON_CPU_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// The cores this process may run on now (sched_getaffinity), ascending.
std::vector<int> AllowedCores();

// The cores of `list` ("" gives {}: not pinned), ascending, each once:
// comma-separated core numbers and ranges "a-b" (a <= b). kInvalidArgument
// naming `field` for a malformed list, or a core not in `allowed`.
absl::StatusOr<std::vector<int>> ParseCpuCores(absl::string_view field,
                                               absl::string_view list,
                                               const std::vector<int>& allowed);

// Restricts every thread of this process (those it starts later included)
// to `cores`; {} leaves the placement as it is. kInvalidArgument when the
// kernel refuses the set.
absl::Status PinProcessToCores(const std::vector<int>& cores);

// OK for the names WorkerdConfig.cpu_kernels accepts ("auto", "onednn",
// "openblas"), else kInvalidArgument naming the field.
absl::Status ValidateCpuKernels(absl::string_view name);

}  // namespace ps

#endif  // COMMON_CPU_PLACEMENT_H_
