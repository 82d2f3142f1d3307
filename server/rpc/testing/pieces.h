// Received bytes as gRPC hands them over: split into pieces, each in its own
// buffer, for the in-place decoders' tests (push_decoder, sparse_decoder).
//
//   Pieces p(bytes, {3, 10});  // p.views: bytes[0, 3), [3, 10), [10, end)

#ifndef SERVER_RPC_TESTING_PIECES_H_
#define SERVER_RPC_TESTING_PIECES_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ps {

// `bytes` cut at `cuts` (ascending), each piece in its own buffer.
struct Pieces {
  std::vector<std::string> storage;
  std::vector<absl::string_view> views;
  Pieces(const std::string& bytes, std::vector<size_t> cuts) {
    cuts.push_back(bytes.size());
    size_t at = 0;
    for (size_t c : cuts) {
      c = std::min(std::max(c, at), bytes.size());
      storage.push_back(bytes.substr(at, c - at));
      at = c;
    }
    for (const std::string& s : storage) views.push_back(s);
  }
};

}  // namespace ps

#endif  // SERVER_RPC_TESTING_PIECES_H_
