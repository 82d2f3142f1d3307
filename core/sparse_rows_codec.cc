#include "core/sparse_rows_codec.h"

#include <utility>

namespace ps {
namespace {

// The encoded size of a bytes field of `n` bytes (0 when left off).
size_t FieldSize(size_t n) { return n == 0 ? 0 : 1 + VarintSize(n) + n; }

// A bytes field whose payload is borrowed when it is at least `copy_below`.
void PutPayload(uint8_t tag, absl::string_view v, size_t copy_below,
                std::string* head, std::vector<WirePiece>* pieces) {
  if (v.empty()) return;
  if (v.size() < copy_below) {
    PutBytesField(tag, v, head);
    return;
  }
  head->push_back(static_cast<char>(tag));
  PutVarint(v.size(), head);
  pieces->push_back(WirePiece{std::move(*head), {}, false});
  head->clear();
  pieces->push_back(WirePiece{{}, v, true});
}

}  // namespace

void EncodeSparseRows(uint8_t list_tag, absl::string_view table,
                      absl::string_view ids, absl::string_view values,
                      size_t copy_below, std::string* head,
                      std::vector<WirePiece>* pieces) {
  head->push_back(static_cast<char>(list_tag));
  PutVarint(FieldSize(table.size()) + FieldSize(ids.size()) +
                FieldSize(values.size()),
            head);
  PutBytesField(kSparseRowsTableTag, table, head);
  PutPayload(kSparseRowsIdsTag, ids, copy_below, head, pieces);
  PutPayload(kSparseRowsValuesTag, values, copy_below, head, pieces);
}

}  // namespace ps
