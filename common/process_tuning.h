// Process-wide settings for the daemons' hot paths (psd, workerd, psbench)
// and psctl's (export streams tables).
//
//   int main() {
//     ps::TuneProcessForThroughput();  // early in main()
//     ...
//   }
//
// Heap: every step moves megabytes through buffers of a few hundred KiB
// (gRPC slices, parsed requests, encoded replies). glibc's defaults serve
// such a buffer with a fresh mmap (or trim the heap after freeing it), so
// each step pays page faults and the kernel zeroing every page again:
// measured at 3-4% of all CPU in perf and ~30% of BSP samples/s at batch 64
// (docs/BENCHMARKS.md). Raising the mmap and trim thresholds keeps those
// pages in the heap for reuse; freed memory is still reused by the process,
// just not handed back to the kernel below the trim threshold.
//
// Mutexes: Debian's Abseil is built with absl::Mutex deadlock detection on,
// which records every lock acquisition in a global graph (~1% of CPU on the
// PushPull path). It is a debugging aid: the daemons turn it off; unit tests
// (which do not call this) keep it on.
//
// gRPC's read path: gRPC 1.51 ships three experiments, off by default, that
// cut the wakeups per byte received: the HTTP/2 layer tells the TCP endpoint
// how many bytes the message in progress still needs (tcp_frame_size_
// tuning), the endpoint sets SO_RCVLOWAT to that so epoll wakes it once they
// are there instead of for every few segments (tcp_rcv_lowat), and reads in
// large chunks (tcp_read_chunks). The daemons turn them on through
// GRPC_EXPERIMENTS unless the environment already sets it. Measured (issue
// 26, docs/BENCHMARKS.md "Transport"): CPU per GB moved -10..-18% for 1 MiB
// tensors on loopback, -4..-7% in the W = 8 lab at 250 Mbit.
#ifndef COMMON_PROCESS_TUNING_H_
#define COMMON_PROCESS_TUNING_H_

#include <cstddef>

namespace ps {

// Allocations below this come from the heap, not a private mmap.
inline constexpr size_t kMmapThresholdBytes = size_t{64} << 20;
// Free memory at the top of the heap kept before it is returned.
inline constexpr size_t kTrimThresholdBytes = size_t{256} << 20;

// gRPC experiments the daemons enable (GRPC_EXPERIMENTS syntax).
inline constexpr char kGrpcExperiments[] =
    "tcp_frame_size_tuning,tcp_rcv_lowat,tcp_read_chunks";

// Applies these settings (the heap ones only with glibc); call it before
// anything uses gRPC. Returns false when the C library refused a heap
// setting.
bool TuneProcessForThroughput();

}  // namespace ps

#endif  // COMMON_PROCESS_TUNING_H_
