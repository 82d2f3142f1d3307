// A minimal .npz writer: a zip archive (stored, not compressed) of .npy
// version 1.0 files, which numpy.load reads.
//
//   std::vector<NpyArray> arrays;
//   arrays.push_back(NpyArray::Float32("fc1.weight", {784, 128}, values));
//   arrays.push_back(NpyArray::Bytes("__job_spec__", json));
//   PS_RETURN_IF_ERROR(WriteNpzFile("/tmp/model.npz", arrays));
//
// Limits: the archive must stay under 4 GiB and 65535 entries (no zip64);
// larger inputs are refused with kInvalidArgument, never truncated.
#ifndef CORE_NPZ_WRITER_H_
#define CORE_NPZ_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps {

// One array of the archive: numpy's key `name` (the entry is name + ".npy").
struct NpyArray {
  std::string name;
  std::string descr;            // numpy dtype string: "<f4", "|S12"
  std::vector<uint64_t> shape;  // empty = a 0-d array
  std::string data;             // the elements, C order, as `descr` says

  // A little-endian float32 array; `values` must hold prod(shape) floats.
  static NpyArray Float32(std::string name, std::vector<uint64_t> shape,
                          absl::Span<const float> values);
  // A 0-d byte string (numpy dtype S<n>): `z[name].item()` gives `text`
  // (without trailing NUL bytes, which numpy strips).
  static NpyArray Bytes(std::string name, std::string text);
};

// The .npy file of `a` (format 1.0): magic, header, data.
std::string EncodeNpy(const NpyArray& a);

// CRC-32 (zip's polynomial 0xEDB88320) of `data`, continuing from `crc`.
uint32_t ZipCrc32(const std::string& data, uint32_t crc = 0);

// The whole .npz archive. kInvalidArgument for a duplicate or empty name, or
// an archive over the limits above.
absl::StatusOr<std::string> EncodeNpz(const std::vector<NpyArray>& arrays);

// Writes EncodeNpz(arrays) to `path` atomically: "<path>.tmp.<pid>" in the
// same folder, fsync, rename. On error nothing is left under either name;
// the error (kInvalidArgument for a path that cannot be written) names the
// file. Blocks on file I/O.
absl::Status WriteNpzFile(const std::string& path,
                          const std::vector<NpyArray>& arrays);

}  // namespace ps

#endif  // CORE_NPZ_WRITER_H_
