// What the hand-written request decoders (push_decoder, sparse_decoder)
// share: errors that name the message and the byte where it stopped
// parsing, and the checked reads of length prefixes and strings.
//
//   constexpr RequestFields kRequest("PushPullRequest");
//   if (!in.ReadTag(&tag)) return kRequest.Malformed("tag", in);
#ifndef SERVER_RPC_REQUEST_FIELDS_H_
#define SERVER_RPC_REQUEST_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/wire_codec.h"

namespace ps {

class RequestFields {
 public:
  explicit constexpr RequestFields(absl::string_view message)
      : message_(message) {}

  // InvalidArgument "request: not a valid <message> (<what> at byte N)".
  absl::Status Malformed(absl::string_view what, const WireReader& in) const;

  // A length prefix whose bytes lie before `end`.
  absl::Status ReadBoundedLength(WireReader* in, size_t end,
                                 absl::string_view at, uint64_t* n) const;

  // A string field of `n` bytes, which exist, copied into `out`; refused
  // when not UTF-8, as protobuf refuses it.
  absl::Status ReadString(WireReader* in, size_t n, absl::string_view at,
                          std::string* out) const;

 private:
  absl::string_view message_;
};

}  // namespace ps

#endif  // SERVER_RPC_REQUEST_FIELDS_H_
