#include "server/sparse/internal/tables_stream.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "server/internal/le_bytes.h"

namespace ps {
namespace sparse_internal {
namespace {

constexpr char kMagic[] = "PSJT";
constexpr uint32_t kFormat = 1;
constexpr uint32_t kIncrementFormat = 2;
// The most entries a list of the stream may hold.
constexpr uint64_t kMaxList = uint64_t{1} << 32;

template <typename T>
absl::Status Put(ByteSink& sink, T v) {
  char b[sizeof(T)];
  internal::SetLe(v, sizeof(T), b);
  return sink.Write(absl::string_view(b, sizeof(T)));
}
template <typename T>
absl::Status Get(ByteSource& source, T* v) {
  char b[sizeof(T)];
  PS_RETURN_IF_ERROR(source.Read(sizeof(T), b));
  *v = static_cast<T>(internal::GetLe(b, sizeof(T)));
  return absl::OkStatus();
}
template <typename T>
absl::Status PutVector(ByteSink& sink, const std::vector<T>& v) {
  PS_RETURN_IF_ERROR(Put<uint64_t>(sink, v.size()));
  std::string scratch;
  return sink.Write(internal::LeView(absl::MakeConstSpan(v), &scratch));
}
template <typename T>
absl::Status GetVector(ByteSource& source, uint64_t max, std::vector<T>* v) {
  uint64_t n = 0;
  PS_RETURN_IF_ERROR(Get(source, &n));
  if (n > max) {
    return absl::DataLossError(
        absl::StrCat("sparse tables checkpoint: a list of ", n,
                     " entries, more than the ", max, " possible"));
  }
  v->resize(n);
  PS_RETURN_IF_ERROR(
      source.Read(n * sizeof(T), reinterpret_cast<char*>(v->data())));
  internal::LeToHost(absl::MakeSpan(*v));
  return absl::OkStatus();
}

// One worker's buffered push, per table of `tables`.
absl::StatusOr<std::unique_ptr<TablePushes>> ReadPushes(
    ByteSource& source, const TableSet& tables) {
  const size_t num_tables = tables.size();
  auto p = std::make_unique<TablePushes>();
  p->ids.resize(num_tables);
  p->grads.resize(num_tables);
  for (size_t k = 0; k < num_tables; ++k) {
    PS_RETURN_IF_ERROR(GetVector(source, kMaxList, &p->ids[k]));
    PS_RETURN_IF_ERROR(GetVector(source, kMaxList, &p->grads[k]));
    if (p->grads[k].size() != p->ids[k].size() * tables.at(k).spec.dim()) {
      return absl::DataLossError(
          "sparse tables checkpoint: a buffered push of the wrong size");
    }
    p->bytes += p->ids[k].size() * 8 + p->grads[k].size() * 4;
  }
  return p;
}

}  // namespace

absl::Status WriteBarrierState(const StepBarrier::State& state,
                               uint32_t num_workers, uint32_t num_tables,
                               ByteSink& sink, bool increment) {
  PS_RETURN_IF_ERROR(sink.Write(absl::string_view(kMagic, 4)));
  PS_RETURN_IF_ERROR(
      Put<uint32_t>(sink, increment ? kIncrementFormat : kFormat));
  PS_RETURN_IF_ERROR(Put<uint64_t>(sink, state.version));
  PS_RETURN_IF_ERROR(Put<uint32_t>(sink, num_workers));
  PS_RETURN_IF_ERROR(Put<uint32_t>(sink, num_tables));
  PS_RETURN_IF_ERROR(PutVector(sink, state.pushed_steps));
  for (const auto& p : state.pending) {
    PS_RETURN_IF_ERROR(Put<uint8_t>(sink, p != nullptr));
    if (p == nullptr) continue;
    for (size_t k = 0; k < num_tables; ++k) {
      PS_RETURN_IF_ERROR(PutVector(sink, p->ids[k]));
      PS_RETURN_IF_ERROR(PutVector(sink, p->grads[k]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepBarrier::State> ReadBarrierState(ByteSource& source,
                                                    uint32_t num_workers,
                                                    const TableSet& tables,
                                                    bool* increment) {
  char magic[4];
  PS_RETURN_IF_ERROR(source.Read(4, magic));
  uint32_t format = 0, workers = 0, num_tables = 0;
  StepBarrier::State state;
  PS_RETURN_IF_ERROR(Get(source, &format));
  if (std::memcmp(magic, kMagic, 4) != 0 ||
      (format != kFormat && format != kIncrementFormat)) {
    return absl::DataLossError(
        "sparse tables checkpoint: not a version-1 JobTables stream");
  }
  if (format == kIncrementFormat && increment == nullptr) {
    return absl::DataLossError(
        "sparse tables checkpoint: an increment, which needs the full "
        "checkpoint it follows");
  }
  if (increment != nullptr) *increment = format == kIncrementFormat;
  PS_RETURN_IF_ERROR(Get(source, &state.version));
  PS_RETURN_IF_ERROR(Get(source, &workers));
  PS_RETURN_IF_ERROR(Get(source, &num_tables));
  if (workers != num_workers || num_tables != tables.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sparse tables checkpoint: %d workers and %d tables, the job has %d "
        "and %d",
        workers, num_tables, num_workers, tables.size()));
  }
  PS_RETURN_IF_ERROR(GetVector(source, workers, &state.pushed_steps));
  if (state.pushed_steps.size() != workers) {
    return absl::DataLossError("sparse tables checkpoint: bad pushed steps");
  }
  state.pending.resize(workers);
  for (uint32_t w = 0; w < workers; ++w) {
    uint8_t has = 0;
    PS_RETURN_IF_ERROR(Get(source, &has));
    if (has == 0) continue;
    PS_ASSIGN_OR_RETURN(state.pending[w], ReadPushes(source, tables));
  }
  return state;
}

}  // namespace sparse_internal
}  // namespace ps
