#include "server/sparse/byte_stream.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status StringSink::Write(absl::string_view bytes) {
  out_->append(bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status StringSource::Read(size_t n, char* out) {
  if (n > bytes_.size()) {
    return absl::DataLossError(absl::StrCat("truncated: wanted ", n, " bytes, ",
                                            bytes_.size(), " left"));
  }
  std::memcpy(out, bytes_.data(), n);
  bytes_.remove_prefix(n);
  return absl::OkStatus();
}

}  // namespace ps
