#include "server/sparse/internal/row_store.h"

#include <cstring>

namespace ps {
namespace sparse_internal {

size_t RowStore::RecordBytes(uint32_t floats_per_row) {
  const size_t values =
      (size_t{floats_per_row} * sizeof(float) + 7) & ~size_t{7};
  return values + sizeof(RowMeta);
}

RowStore::RowStore(uint32_t floats_per_row, uint32_t slab_rows_log2)
    : meta_offset_(RecordBytes(floats_per_row) - sizeof(RowMeta)),
      record_bytes_(RecordBytes(floats_per_row)),
      slab_log2_(slab_rows_log2),
      slab_mask_((1u << slab_rows_log2) - 1),
      slab_bytes_(record_bytes_ << slab_rows_log2) {}

size_t RowStore::BytesFor(size_t rows) const {
  const size_t slabs = (rows + slab_mask_) >> slab_log2_;
  return slabs * (slab_bytes_ + sizeof(void*));
}

void RowStore::Unlink(uint32_t slot) {
  RowMeta* m = MetaPtr(slot);
  if (m->newer != kNil)
    MetaPtr(m->newer)->older = m->older;
  else
    newest_ = m->older;
  if (m->older != kNil)
    MetaPtr(m->older)->newer = m->newer;
  else
    oldest_ = m->newer;
}

void RowStore::LinkNewest(uint32_t slot) {
  RowMeta* m = MetaPtr(slot);
  m->newer = kNil;
  m->older = newest_;
  if (newest_ != kNil) MetaPtr(newest_)->newer = slot;
  newest_ = slot;
  if (oldest_ == kNil) oldest_ = slot;
}

uint32_t RowStore::Append(uint64_t id, uint64_t step, uint64_t pushes) {
  const uint32_t slot = size_;
  if ((slot >> slab_log2_) >= slabs_.size()) {
    slabs_.push_back(NewSlab(slab_bytes_));
  }
  ++size_;
  RowMeta* m = MetaPtr(slot);
  m->id = id;
  m->last_step = step;
  m->pushes = pushes;
  LinkNewest(slot);
  if (track_) MarkChanged(slot);
  return slot;
}

void RowStore::SetMeta(uint32_t slot, uint64_t last_step, uint64_t pushes,
                       bool newest) {
  RowMeta* m = MetaPtr(slot);
  m->last_step = last_step;
  m->pushes = pushes;
  if (newest && newest_ != slot) {
    Unlink(slot);
    LinkNewest(slot);
  }
  if (track_) MarkChanged(slot);
}

void RowStore::TrackChanges() {
  track_ = true;
  changed_.assign((size_t{size_} + 63) / 64, 0);
}

std::vector<uint64_t> RowStore::TakeChanges() {
  std::vector<uint64_t> bits;
  if (!track_) return bits;
  bits.swap(changed_);
  bits.resize((size_t{size_} + 63) / 64, 0);
  changed_.assign(bits.size(), 0);
  return bits;
}

void RowStore::Touch(uint32_t slot, uint64_t step) {
  MarkPush(slot, step);
  if (newest_ == slot) return;
  Unlink(slot);
  LinkNewest(slot);
}

uint32_t RowStore::Remove(uint32_t slot) {
  Unlink(slot);
  const uint32_t last = size_ - 1;
  if (track_) {
    // The moved row keeps its bit; the vacated last slot is clean.
    const bool moved_changed = Changed(changed_, last);
    if ((slot >> 6) < changed_.size()) {
      changed_[slot >> 6] &= ~(uint64_t{1} << (slot & 63));
    }
    if (moved_changed && slot != last) MarkChanged(slot);
    if ((last >> 6) < changed_.size()) {
      changed_[last >> 6] &= ~(uint64_t{1} << (last & 63));
    }
  }
  if (slot != last) {
    std::memcpy(Record(slot), Record(last), record_bytes_);
    RowMeta* m = MetaPtr(slot);
    if (m->newer != kNil)
      MetaPtr(m->newer)->older = slot;
    else
      newest_ = slot;
    if (m->older != kNil)
      MetaPtr(m->older)->newer = slot;
    else
      oldest_ = slot;
  }
  size_ = last;
  if ((last & slab_mask_) == 0) slabs_.pop_back();  // the last slab emptied
  return last;
}

void RowStore::Clear() {
  if (capture_ != nullptr) {
    for (uint32_t s = 0; s < capture_->rows_ && s < size_; ++s) CopyBefore(s);
  }
  slabs_.clear();
  slabs_.shrink_to_fit();
  size_ = 0;
  newest_ = oldest_ = kNil;
  changed_.clear();
}

void RowStore::CopyRecords(std::string* out) const {
  const size_t start = out->size();
  out->resize(start + size_t{size_} * record_bytes_);
  char* dst = out->data() + start;
  const uint32_t per_slab = slab_mask_ + 1;
  for (uint32_t s = 0; s < size_; s += per_slab) {
    const uint32_t n = size_ - s < per_slab ? size_ - s : per_slab;
    std::memcpy(dst, slabs_[s >> slab_log2_].get(), size_t{n} * record_bytes_);
    dst += size_t{n} * record_bytes_;
  }
}

size_t RowCapture::bytes() const {
  return blocks_.size() * kRecordsPerBlock * record_bytes_ +
         index_.capacity() * (sizeof(uint32_t) * 2 + 1);
}

std::shared_ptr<const RowCapture> RowStore::Freeze() {
  if (capture_ != nullptr) return nullptr;
  capture_ = std::make_shared<RowCapture>();
  capture_->rows_ = size_;
  capture_->oldest_ = oldest_;
  capture_->record_bytes_ = record_bytes_;
  return capture_;
}

void RowStore::Release(const RowCapture* capture) {
  if (capture_.get() == capture) capture_.reset();
}

void RowStore::CopyBefore(uint32_t slot) {
  RowCapture& c = *capture_;
  const auto [it, fresh] =
      c.index_.try_emplace(slot, static_cast<uint32_t>(c.index_.size()));
  if (!fresh) return;
  const uint32_t k = it->second;
  if (k / RowCapture::kRecordsPerBlock >= c.blocks_.size()) {
    c.blocks_.emplace_back(
        new char[RowCapture::kRecordsPerBlock * record_bytes_]);
  }
  char* dst = c.blocks_[k / RowCapture::kRecordsPerBlock].get() +
              size_t{k % RowCapture::kRecordsPerBlock} * record_bytes_;
  const char* src = slabs_[slot >> slab_log2_].get() +
                    size_t{slot & slab_mask_} * record_bytes_;
  std::memcpy(dst, src, record_bytes_);
}

const char* RowStore::FrozenRecord(const RowCapture& capture,
                                   uint32_t slot) const {
  const auto it = capture.index_.find(slot);
  if (it == capture.index_.end()) return Record(slot);
  const uint32_t k = it->second;
  return capture.blocks_[k / RowCapture::kRecordsPerBlock].get() +
         size_t{k % RowCapture::kRecordsPerBlock} * record_bytes_;
}

RowMeta RowStore::MetaAt(const char* records, size_t record_bytes,
                         uint32_t slot) {
  RowMeta m;
  std::memcpy(&m, records + (size_t{slot} + 1) * record_bytes - sizeof(m),
              sizeof(m));
  return m;
}

}  // namespace sparse_internal
}  // namespace ps
