#include "server/rpc/request_fields.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/common.h"

namespace ps {

absl::Status RequestFields::Malformed(absl::string_view what,
                                      const WireReader& in) const {
  return absl::InvalidArgumentError(
      absl::StrCat("request: not a valid ", message_, " (", what, " at byte ",
                   in.position(), ")"));
}

absl::Status RequestFields::ReadBoundedLength(WireReader* in, size_t end,
                                              absl::string_view at,
                                              uint64_t* n) const {
  if (!in->ReadLength(n)) return Malformed(absl::StrCat(at, " (length)"), *in);
  if (*n > end - in->position()) {
    return Malformed(absl::StrCat(at, " (truncated)"), *in);
  }
  return absl::OkStatus();
}

absl::Status RequestFields::ReadString(WireReader* in, size_t n,
                                       absl::string_view at,
                                       std::string* out) const {
  out->resize(n);
  in->Read(out->data(), n);
  if (!google::protobuf::internal::IsStructurallyValidUTF8(*out)) {
    return Malformed(absl::StrCat(at, " is not UTF-8"), *in);
  }
  return absl::OkStatus();
}

}  // namespace ps
