// IDX files (the MNIST format): a big-endian header, then raw uint8 data.
//
// Reads images (idx3: count x rows x cols) and labels (idx1: count), plain
// or gzipped; gzip is detected from the file's magic bytes, not its name.
//
//   absl::StatusOr<IdxImages> images =
//   ReadIdxImages("train-images-idx3-ubyte.gz"); if (!images.ok()) return
//   images.status(); const uint8_t* first = images->pixels.data();  // rows *
//   cols bytes
//
// Every failure (missing file, bad gzip, bad magic, wrong dimensions, short
// or overlong data) is an absl error whose message names the file.
#ifndef WORKER_DATA_IDX_H_
#define WORKER_DATA_IDX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// Images of one IDX file, row-major: image i is
// pixels[i * rows * cols, (i + 1) * rows * cols).
struct IdxImages {
  size_t count = 0;
  size_t rows = 0;
  size_t cols = 0;
  std::vector<uint8_t> pixels;
};

// Reads the whole file at `path`, inflating it when it starts with the gzip
// magic (concatenated gzip members are read as one stream).
// kNotFound when the file cannot be opened, kDataLoss for a corrupt or
// truncated gzip stream.
absl::StatusOr<std::vector<uint8_t>> ReadMaybeGzipped(const std::string& path);

// Parses an idx3 uint8 file (magic 0x00000803). kDataLoss when the magic,
// the dimensions or the data length is wrong; kNotFound as above.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);

// Parses an idx1 uint8 file (magic 0x00000801). Errors as ReadIdxImages.
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

}  // namespace ps

#endif  // WORKER_DATA_IDX_H_
