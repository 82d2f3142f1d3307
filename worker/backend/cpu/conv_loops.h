// The CPU backend's convolution and pooling loops (private to :cpu_backend).
// Arguments are checked by the caller (arg_checks.h); these only compute.
//
// The CUDA kernels compute one output element per thread with the gather
// functions of elementwise.h (Im2ColAt, Col2ImAt, MaxPoolAt, MaxPoolGradAt),
// which are the definition. These loops walk the NHWC images row by row
// instead, with contiguous runs and no per-element index division, and give
// the same bits: Im2Col and MaxPoolBackward only copy, MaxPool compares in
// the same scan order, and Col2Im scatters the cols rows in ascending order
// onto a zeroed image, which adds every element's terms in exactly
// Col2ImAt's order (cpu_conv_test checks all four bitwise).

#ifndef WORKER_BACKEND_CPU_CONV_LOOPS_H_
#define WORKER_BACKEND_CPU_CONV_LOOPS_H_

#include <cstdint>

#include "worker/backend/elementwise.h"

namespace ps {
namespace cpu_internal {

void Im2ColLoop(const ImageShape& shape, int kernel, const float* x,
                float* cols);

void Col2ImLoop(const ImageShape& shape, int kernel, const float* cols,
                float* dx);

void MaxPoolLoop(const ImageShape& shape, int pool, const float* x, float* y,
                 int32_t* argmax);

void MaxPoolBackwardLoop(const ImageShape& shape, int pool,
                         const int32_t* argmax, const float* dy, float* dx);

}  // namespace cpu_internal
}  // namespace ps

#endif  // WORKER_BACKEND_CPU_CONV_LOOPS_H_
