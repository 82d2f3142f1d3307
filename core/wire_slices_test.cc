#include "core/wire_slices.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

std::vector<grpc::Slice> Dump(const grpc::ByteBuffer& buf) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buf.Dump(&slices).ok());
  return slices;
}

TEST(WireSlicesTest, PiecesInOrderThenTheTail) {
  const std::string payload(1000, 'p');
  std::vector<WirePiece> pieces;
  pieces.push_back(WirePiece{"head", {}, false});
  pieces.push_back(WirePiece{{}, payload, true});
  std::vector<grpc::Slice> slices =
      Dump(ToSendBuffer(pieces, "tail", StaticSlice));
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(slices[0].begin()),
                        slices[0].size()),
            "head");
  // The borrowed payload is sent from the caller's memory, not a copy.
  EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), payload.data());
  EXPECT_EQ(slices[1].size(), payload.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(slices[2].begin()),
                        slices[2].size()),
            "tail");
}

TEST(WireSlicesTest, EmptyTailAddsNoSlice) {
  std::vector<WirePiece> pieces;
  pieces.push_back(WirePiece{"only", {}, false});
  EXPECT_EQ(Dump(ToSendBuffer(pieces, "", StaticSlice)).size(), 1u);
}

// A borrow with a destroy callback: gRPC drops it with the buffer.
TEST(WireSlicesTest, BorrowDecidesHowThePayloadOutlivesTheSend) {
  const std::string payload(64, 'x');
  int borrowed = 0, released = 0;
  {
    std::vector<WirePiece> pieces;
    pieces.push_back(WirePiece{{}, payload, true});
    pieces.push_back(WirePiece{{}, payload, true});
    grpc::ByteBuffer buf =
        ToSendBuffer(pieces, "", [&](absl::string_view bytes) {
          ++borrowed;
          return grpc::Slice(
              const_cast<char*>(bytes.data()), bytes.size(),
              [](void* n) { ++*static_cast<int*>(n); }, &released);
        });
    EXPECT_EQ(borrowed, 2);
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 2);
}

}  // namespace
}  // namespace ps
