// CtrExample: one click-through-rate example (a label, 13 dense features and
// 26 single-valued categorical ids), its 264-byte binary record, and
// CtrBatch, B examples laid out column-wise for a model.
//
//   CtrExample e;
//   e.label = 1.0f;
//   e.ids[3] = CtrId(3, 0x5a9ed9b0);      // field 3, Criteo hex value
//   e.ids[4] = CtrId(4, kCtrMissingValue);
//   uint8_t record[kCtrRecordBytes];
//   EncodeCtrRecord(e, record);           // what tools/datagen/ctr_datagen
//   writes
//
// The contract shared with the PyTorch peer (python reads the same files):
//  - ids: a field f in [0, 26) and a per-field value v < 2^40 form the global
//    id (f << 40) | v, so the fields never collide in one table. Criteo TSV
//    values are the 32-bit hex values; a missing categorical is
//    v = kCtrMissingValue = 2^32, one reserved id per field.
//  - dense: floats as the model reads them. For the TSV's integers x it is
//    log(1 + max(x, 0)), and 0 for a missing one (worker/data/ctr_tsv.h).
//  - record: little-endian, no header, 264 bytes = float32 label,
//    float32 dense[13], uint64 ids[26]; numpy dtype
//    [('label','<f4'),('dense','<f4',(13,)),('ids','<u8',(26,))].
#ifndef WORKER_DATA_CTR_EXAMPLE_H_
#define WORKER_DATA_CTR_EXAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace ps {

inline constexpr int kCtrDenseFeatures = 13;
inline constexpr int kCtrCategoricalFields = 26;
// Bits of a global id that hold the per-field value.
inline constexpr int kCtrValueBits = 40;
inline constexpr uint64_t kCtrValueLimit = uint64_t{1} << kCtrValueBits;
// The value of a missing categorical (above every 32-bit Criteo value).
inline constexpr uint64_t kCtrMissingValue = uint64_t{1} << 32;
inline constexpr size_t kCtrRecordBytes =
    4 + 4 * kCtrDenseFeatures + 8 * kCtrCategoricalFields;
static_assert(kCtrRecordBytes == 264, "the record layout is a contract");

// The global id of value `value` (< kCtrValueLimit) of field `field`
// (< kCtrCategoricalFields).
constexpr uint64_t CtrId(int field, uint64_t value) {
  return (static_cast<uint64_t>(field) << kCtrValueBits) | value;
}
constexpr int CtrIdField(uint64_t id) {
  return static_cast<int>(id >> kCtrValueBits);
}
constexpr uint64_t CtrIdValue(uint64_t id) { return id & (kCtrValueLimit - 1); }

struct CtrExample {
  float label = 0.0f;  // 0 or 1
  float dense[kCtrDenseFeatures] = {};
  uint64_t ids[kCtrCategoricalFields] = {};  // ids[f] has CtrIdField == f
};

// Writes `e` as one kCtrRecordBytes record to `out`.
void EncodeCtrRecord(const CtrExample& e, uint8_t* out);

// Reads one kCtrRecordBytes record. Any bytes decode; callers that need the
// contract check it with CheckCtrExample.
void DecodeCtrRecord(const uint8_t* in, CtrExample* e);

// OK when `e` keeps the contract: label 0 or 1, finite dense features, ids[f]
// in field f. kInvalidArgument naming the first offending field otherwise.
absl::Status CheckCtrExample(const CtrExample& e);

// B examples, column-wise: labels[b], dense[b * 13 + j], ids[b * 26 + f].
// A plain value; Resize reuses storage.
struct CtrBatch {
  size_t size = 0;
  std::vector<float> labels;
  std::vector<float> dense;
  std::vector<uint64_t> ids;

  void Resize(size_t n);
  // Copies `e` into row b < size.
  void Set(size_t b, const CtrExample& e);
  // Row b < size as an example.
  CtrExample Get(size_t b) const;
};

}  // namespace ps

#endif  // WORKER_DATA_CTR_EXAMPLE_H_
