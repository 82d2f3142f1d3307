// Decodes a PushPullRequest from its wire bytes as gRPC received them (in
// pieces), without copying the gradients' payloads: the shard reads them in
// place (server/push_input.h). Accepts what protobuf's parser accepts
// (fields in any order, unknown fields, a repeated scalar's last value
// wins, a known field with another wire type skipped as unknown) and
// refuses what it refuses (truncation, malformed varints, job_id not
// UTF-8).
//
//   std::deque<std::string> owned;
//   PS_RETURN_IF_ERROR(DecodePushPullRequest(pieces, keep, &header,
//                                            &gradients, &owned));
//   shard.PushPull(header, gradients, &resp, done);
#ifndef SERVER_RPC_PUSH_DECODER_H_
#define SERVER_RPC_PUSH_DECODER_H_

#include <deque>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"
#include "server/push_input.h"

namespace ps {

// Fills `header` with every field but `gradients` (cleared first) and
// `gradients` with views of `pieces`: a dense FP32 payload as the pieces it
// lies in, sharing `keep`; anything the shard reads whole (another format's
// payload, sparse offsets) as one view, copied into `*owned` when it spans
// pieces. The views are valid while `pieces`' storage (held by `keep`) and
// `*owned` are. Malformed input is kInvalidArgument naming what broke.
absl::Status DecodePushPullRequest(absl::Span<const absl::string_view> pieces,
                                   const std::shared_ptr<const void>& keep,
                                   PushPullRequest* header,
                                   GradientsIn* gradients,
                                   std::deque<std::string>* owned);

}  // namespace ps

#endif  // SERVER_RPC_PUSH_DECODER_H_
