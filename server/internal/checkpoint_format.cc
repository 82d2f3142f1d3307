#include "server/internal/checkpoint_format.h"

#include "absl/strings/str_cat.h"

namespace ps {
namespace internal {

bool Reader::Bytes(const std::string& what, uint64_t n,
                   absl::string_view* out) {
  if (!Need(what, n)) return false;
  *out = bytes_.substr(at_, n);
  at_ += n;
  return true;
}

bool Reader::Floats(const std::string& what, absl::Span<float> out) {
  if (out.size() > (bytes_.size() - at_) / sizeof(float)) {
    return Fail(what, out.size() * sizeof(float));
  }
  ReadFloats(bytes_.data() + at_, out);
  at_ += out.size() * sizeof(float);
  return true;
}

bool Reader::Need(const std::string& what, uint64_t n) {
  if (n <= bytes_.size() - at_) return true;
  return Fail(what, n);
}

bool Reader::Fail(const std::string& what, uint64_t n) {
  error_ = absl::StrCat("payload ends inside ", what, " (", n,
                        " bytes needed at payload offset ", at_, ", ",
                        bytes_.size() - at_, " left)");
  return false;
}

}  // namespace internal
}  // namespace ps
