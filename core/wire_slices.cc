#include "core/wire_slices.h"

#include <utility>

namespace ps {

grpc::Slice StaticSlice(absl::string_view bytes) {
  return grpc::Slice(bytes.data(), bytes.size(), grpc::Slice::STATIC_SLICE);
}

grpc::ByteBuffer ToSendBuffer(
    std::vector<WirePiece>& pieces, std::string tail,
    absl::FunctionRef<grpc::Slice(absl::string_view)> borrow) {
  std::vector<grpc::Slice> slices;
  slices.reserve(pieces.size() + 1);
  for (WirePiece& p : pieces) {
    if (p.is_borrowed) {
      slices.push_back(borrow(p.borrowed));
    } else {
      slices.emplace_back(std::move(p.owned));
    }
  }
  if (!tail.empty()) slices.emplace_back(std::move(tail));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace ps
