// One chunk's payload on the wire in the job's WireFormat (proto/job.proto):
// dense (every element) or sparse (top-k: offsets + values), fp32, bf16 or
// fp16, as ChunkData describes it in proto/ps.proto. Both the worker and
// the shard encode and decode through here.
//
//   std::string data;
//   const WireFormat used = EncodeValues(BF16, values, &data);
//   ChunkData c;  c.set_format(used);  c.set_data(data);
//
//   PayloadProblem problem;
//   PS_RETURN_IF_ERROR(CheckPayload(c.format(), c.data(), c.indices(),
//                                   length, "gradients[0]", &problem));
//   DecodePayload(c.format(), c.data(), c.indices(), absl::MakeSpan(dense));
#ifndef CORE_WIRE_FORMAT_H_
#define CORE_WIRE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {

// Bytes per element: 4 for FP32 (and UNSPECIFIED), 2 for BF16 and FP16,
// 0 for a number that is no WireFormat.
size_t ElementBytes(int format);
bool IsKnownWireFormat(int format);
// FP32 for UNSPECIFIED, else `format`.
WireFormat Resolved(WireFormat format);
// "FP32", "BF16", "FP16", or the number.
std::string WireFormatName(int format);

// Replaces *out with `values` in `format` and returns the ChunkData.format
// to send: WIRE_FORMAT_UNSPECIFIED for FP32 (it stays off the wire), or
// that when a finite value would round to inf in BF16/FP16 (the chunk then
// travels as FP32: the caller counts it). Non-finite values convert to
// themselves.
WireFormat EncodeValues(WireFormat format, absl::Span<const float> values,
                        std::string* out);

// Element `i` of a `format` payload, as float (i within the payload).
float ValueAt(int format, absl::string_view data, size_t i);

enum class PayloadProblem { kNone, kFormat, kSize, kIndices };

// Checks a chunk of `length` elements: a known format, the data length for
// it, and (sparse) offsets that are whole uint32s, strictly ascending and
// < length. Errors are kInvalidArgument naming `field` ("gradients[2]")
// with the subfield and the entry/byte offset; `*problem` says which.
absl::Status CheckPayload(int format, absl::string_view data,
                          absl::string_view indices, uint64_t length,
                          absl::string_view field, PayloadProblem* problem);
// The same, for a payload of `data_bytes` bytes (only its size is checked).
absl::Status CheckPayload(int format, size_t data_bytes,
                          absl::string_view indices, uint64_t length,
                          absl::string_view field, PayloadProblem* problem);

// Index of the first NaN or Inf among the payload's values, or -1.
int64_t FirstNonFiniteValue(int format, absl::string_view data);

// Decodes a payload that passed CheckPayload into the dense `out` (the
// chunk's length): sparse payloads scatter into zeros.
void DecodePayload(int format, absl::string_view data,
                   absl::string_view indices, absl::Span<float> out);

// Entry `i` of a sparse payload's offsets.
uint32_t OffsetAt(absl::string_view indices, size_t i);
// Appends a little-endian uint32 offset.
void AppendOffset(uint32_t offset, std::string* indices);

}  // namespace ps

#endif  // CORE_WIRE_FORMAT_H_
