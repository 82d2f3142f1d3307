// A table's rows (ids and values, without optimizer state or admission
// counters), decoded from its SparseTable::Save stream as the stream is
// written, in batches: how the shard exports a sparse table (psctl export)
// without a second copy of it.
//
//   TableRowsSink sink(/*batch_rows=*/4096,
//                      [&](absl::Span<const uint64_t> ids,
//                          absl::Span<const float> values) {
//                        return Send(ids, values);  // dim floats per id
//                      });
//   PS_RETURN_IF_ERROR(table.Save(sink));
//   PS_RETURN_IF_ERROR(sink.Finish());
//
// Memory: one batch and at most one row's worth of a record split across
// writes; SparseTable::Save itself holds one stripe's copy at a time.
// Rows come in the stream's order (by saving stripe, least recently
// pushed first), not by id.
//
// The format is SparseTable's (version 2, documented in
// server/sparse/sparse_table_checkpoint.cc); table_rows_test pins this
// decoder to it by saving real tables. The stream comes straight from
// Save in this process, never from a file, so the bodies' CRC-32C are not
// recomputed; the header's magic, version and CRC and the trailer's counts
// refuse a stream this decoder does not understand (DATA_LOSS). Restoring
// a checkpoint file goes through SparseTable/JobTables::Restore, which
// checks everything.
//
// Thread-compatible.
#ifndef SERVER_SPARSE_TABLE_ROWS_H_
#define SERVER_SPARSE_TABLE_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/sparse/byte_stream.h"

namespace ps {

class TableRowsSink : public ByteSink {
 public:
  // Receives ids.size() rows: values holds dim() floats per id. An error
  // stops the save and is returned by Write (and so by Save).
  using EmitFn = std::function<absl::Status(absl::Span<const uint64_t> ids,
                                            absl::Span<const float> values)>;

  // Batches of at most `batch_rows` (>= 1) rows.
  TableRowsSink(size_t batch_rows, EmitFn emit);

  absl::Status Write(absl::string_view bytes) override;
  // After Save returned OK: emits the last batch; DATA_LOSS unless the
  // stream ended exactly after its trailer.
  absl::Status Finish();

  // From the stream's header (0 before it).
  uint32_t dim() const { return dim_; }
  const std::string& table_name() const { return name_; }
  // Rows emitted so far.
  uint64_t rows() const { return rows_; }

 private:
  enum class Part {
    kHeader,
    kName,
    kSection,
    kRows,
    kCounters,
    kSectionCrc,
    kTrailer,
    kDone
  };

  // Bytes of the next item of the current part.
  size_t UnitBytes() const;
  // Consumes `n` whole items of the current part held in `bytes`.
  absl::Status Consume(absl::string_view bytes, size_t n);
  absl::Status TakeRows(absl::string_view bytes, size_t n);
  absl::Status EmitBatch();

  const size_t batch_rows_;
  const EmitFn emit_;
  Part part_ = Part::kHeader;
  std::string partial_;  // an item split across writes
  uint32_t dim_ = 0;
  uint32_t floats_ = 0;  // per row in the stream: dim + optimizer state
  uint32_t name_bytes_ = 0;
  uint32_t header_crc_ = 0;
  std::string name_;
  uint32_t sections_ = 0;
  uint32_t section_ = 0;  // sections read
  uint64_t left_ = 0;     // rows or counters left in the section
  uint64_t counters_ = 0;
  uint64_t rows_ = 0;  // emitted and batched
  uint64_t total_counters_ = 0;
  std::vector<uint64_t> ids_;
  std::vector<float> values_;
};

}  // namespace ps

#endif  // SERVER_SPARSE_TABLE_ROWS_H_
