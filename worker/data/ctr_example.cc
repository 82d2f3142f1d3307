#include "worker/data/ctr_example.h"

#include <cmath>
#include <cstring>

#include "absl/base/config.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace {

#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error "the CTR record is little-endian; add byte swaps for this host"
#endif

constexpr size_t kDenseOffset = 4;
constexpr size_t kIdsOffset = kDenseOffset + 4 * kCtrDenseFeatures;

}  // namespace

void EncodeCtrRecord(const CtrExample& e, uint8_t* out) {
  std::memcpy(out, &e.label, 4);
  std::memcpy(out + kDenseOffset, e.dense, 4 * kCtrDenseFeatures);
  std::memcpy(out + kIdsOffset, e.ids, 8 * kCtrCategoricalFields);
}

void DecodeCtrRecord(const uint8_t* in, CtrExample* e) {
  std::memcpy(&e->label, in, 4);
  std::memcpy(e->dense, in + kDenseOffset, 4 * kCtrDenseFeatures);
  std::memcpy(e->ids, in + kIdsOffset, 8 * kCtrCategoricalFields);
}

absl::Status CheckCtrExample(const CtrExample& e) {
  if (e.label != 0.0f && e.label != 1.0f) {
    return absl::InvalidArgumentError(
        absl::StrFormat("label is %g, want 0 or 1", e.label));
  }
  for (int j = 0; j < kCtrDenseFeatures; ++j) {
    if (!std::isfinite(e.dense[j])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dense[%d] is %g, want a finite value", j, e.dense[j]));
    }
  }
  for (int f = 0; f < kCtrCategoricalFields; ++f) {
    if (CtrIdField(e.ids[f]) != f) {
      return absl::InvalidArgumentError(
          absl::StrFormat("ids[%d] = 0x%x belongs to field %d, want field %d",
                          f, e.ids[f], CtrIdField(e.ids[f]), f));
    }
  }
  return absl::OkStatus();
}

void CtrBatch::Resize(size_t n) {
  size = n;
  labels.resize(n);
  dense.resize(n * kCtrDenseFeatures);
  ids.resize(n * kCtrCategoricalFields);
}

void CtrBatch::Set(size_t b, const CtrExample& e) {
  labels[b] = e.label;
  std::memcpy(&dense[b * kCtrDenseFeatures], e.dense,
              sizeof(float) * kCtrDenseFeatures);
  std::memcpy(&ids[b * kCtrCategoricalFields], e.ids,
              sizeof(uint64_t) * kCtrCategoricalFields);
}

CtrExample CtrBatch::Get(size_t b) const {
  CtrExample e;
  e.label = labels[b];
  std::memcpy(e.dense, &dense[b * kCtrDenseFeatures],
              sizeof(float) * kCtrDenseFeatures);
  std::memcpy(e.ids, &ids[b * kCtrCategoricalFields],
              sizeof(uint64_t) * kCtrCategoricalFields);
  return e;
}

}  // namespace ps
