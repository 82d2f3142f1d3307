// The admission counters of one stripe: how many pushes each not-yet-stored
// id has seen. Open addressing with linear probing over two arrays (ids and
// counts, 12 bytes per bucket), load <= 3/4, backward-shift deletion.
//
//   const uint32_t seen = counts.Get(id) + 1;
//   if (seen >= admission_count) { counts.Erase(id); create the row; }
//   else counts.Set(id, seen);
//
// Not thread-safe: the stripe's mutex guards it.
#ifndef SERVER_SPARSE_INTERNAL_ADMISSION_COUNTS_H_
#define SERVER_SPARSE_INTERNAL_ADMISSION_COUNTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ps {
namespace sparse_internal {

class AdmissionCounts {
 public:
  static constexpr size_t kBytesPerBucket = sizeof(uint64_t) + sizeof(uint32_t);

  AdmissionCounts() = default;
  AdmissionCounts(const AdmissionCounts&) = delete;
  AdmissionCounts& operator=(const AdmissionCounts&) = delete;
  AdmissionCounts(AdmissionCounts&&) = default;
  AdmissionCounts& operator=(AdmissionCounts&&) = default;

  size_t size() const { return size_; }
  size_t bytes() const { return capacity_ * kBytesPerBucket; }
  // Bytes held once there are `entries` counters (it never shrinks).
  size_t BytesFor(size_t entries) const;

  // The count of `id`, 0 when it has none.
  uint32_t Get(uint64_t id) const;
  // Sets the count of `id` (count >= 1), inserting it (may allocate).
  void Set(uint64_t id, uint32_t count);
  // Removes `id`'s counter if it has one.
  void Erase(uint64_t id);
  void Clear();

  // Calls fn(id, count) for every counter, in bucket order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (counts_[i] != 0) fn(ids_[i], counts_[i]);
    }
  }

 private:
  static size_t CapacityFor(size_t entries);
  size_t Home(uint64_t id) const;
  // The bucket of `id`, or of the empty bucket that ends its run.
  size_t Probe(uint64_t id) const;
  void Rehash(size_t new_capacity);

  std::unique_ptr<uint64_t[]> ids_;
  std::unique_ptr<uint32_t[]> counts_;  // 0 marks an empty bucket
  size_t capacity_ = 0;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_ADMISSION_COUNTS_H_
