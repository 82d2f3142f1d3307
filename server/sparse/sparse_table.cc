#include "server/sparse/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "server/sparse/internal/batch.h"

namespace ps {
namespace {

using sparse_internal::RowHash;
using sparse_internal::RowStore;

constexpr uint32_t kMaxStripes = 4096;
constexpr uint32_t kMaxSlabRows = 1u << 20;
constexpr uint64_t kMaxFloatsPerRow = 1u << 16;
constexpr uint32_t kMaxHotIds = 1024;
// The smallest index and admission table a stripe allocates.
constexpr uint64_t kMinTableBuckets = 16;

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

uint32_t Log2(uint32_t x) {
  uint32_t l = 0;
  while ((1u << l) < x) ++l;
  return l;
}

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status ValidateOptions(const SparseTable::Options& o) {
  if (o.name.empty()) return Invalid("name", "must not be empty");
  if (o.dim == 0) return Invalid("dim", "must be >= 1");
  if (uint64_t{o.dim} + o.state_floats_per_row > kMaxFloatsPerRow) {
    return Invalid("state_floats_per_row",
                   absl::StrCat("dim + state_floats_per_row must be <= ",
                                kMaxFloatsPerRow));
  }
  PS_RETURN_IF_ERROR(o.init.Validate());
  if (o.admission_count == 0) return Invalid("admission_count", "must be >= 1");
  if (!IsPowerOfTwo(o.num_stripes) || o.num_stripes > kMaxStripes) {
    return Invalid("num_stripes",
                   absl::StrCat("must be a power of two <= ", kMaxStripes,
                                ", got ", o.num_stripes));
  }
  if (!IsPowerOfTwo(o.slab_rows) || o.slab_rows > kMaxSlabRows) {
    return Invalid("slab_rows",
                   absl::StrCat("must be a power of two <= ", kMaxSlabRows,
                                ", got ", o.slab_rows));
  }
  if (o.hot_ids > kMaxHotIds) {
    return Invalid("hot_ids", absl::StrCat("must be <= ", kMaxHotIds));
  }
  if (o.lru && o.memory_budget_bytes == 0) {
    return Invalid("lru", "needs memory_budget_bytes > 0");
  }
  if (o.memory_budget_bytes > 0) {
    const uint64_t share = o.memory_budget_bytes / o.num_stripes;
    const uint64_t slab =
        RowStore::RecordBytes(o.dim + o.state_floats_per_row) * o.slab_rows +
        sizeof(void*);
    const uint64_t floor = slab + kMinTableBuckets * sizeof(uint64_t) +
                           (o.admission_count > 1 ? kMinTableBuckets * 12 : 0);
    if (share < floor) {
      return Invalid("memory_budget_bytes",
                     absl::StrCat("the share of each of the ", o.num_stripes,
                                  " stripes (", share, " bytes) cannot hold ",
                                  "one slab of ", o.slab_rows, " rows and its ",
                                  "index (", floor, " bytes)"));
    }
  }
  return absl::OkStatus();
}

bool Finite(float x) { return std::isfinite(x); }

}  // namespace

std::vector<SparseTable::Segment> SparseTable::Segments(
    absl::Span<const uint32_t> begin) {
  std::vector<Segment> segments;
  for (uint32_t s = 0; s + 1 < begin.size(); ++s) {
    for (uint32_t b = begin[s]; b < begin[s + 1]; b += kSegmentRows) {
      segments.push_back({s, b, std::min(begin[s + 1], b + kSegmentRows)});
    }
  }
  return segments;
}

template <typename HashAt, typename Apply>
void SparseTable::Pipeline(const std::vector<Segment>& segments, bool lock,
                           HashAt hash_at,
                           Apply apply) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Prefetch stage `rows` (false: the index buckets) of segment k.
  auto prefetch = [&](size_t k, bool rows) {
    if (k >= segments.size()) return;
    const Segment& g = segments[k];
    const LockedStripe& stripe = *stripes_[g.stripe];
    if (lock) stripe.mu.ReaderLock();
    auto at = [&](size_t i) { return hash_at(g.begin + i); };
    if (rows) {
      stripe.data.PrefetchRows(g.end - g.begin, at);
    } else {
      stripe.data.PrefetchIndex(g.end - g.begin, at);
    }
    if (lock) stripe.mu.ReaderUnlock();
  };
  prefetch(0, false);
  prefetch(1, false);
  prefetch(0, true);
  for (size_t k = 0; k < segments.size(); ++k) {
    prefetch(k + 2, false);
    prefetch(k + 1, true);
    apply(segments[k]);
  }
}

absl::StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(
    Options options) {
  if (absl::Status st = ValidateOptions(options); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("sparse table '", options.name,
                                                "': ", st.message()));
  }
  return std::unique_ptr<SparseTable>(new SparseTable(std::move(options)));
}

SparseTable::SparseTable(Options options)
    : options_(std::move(options)), stripe_mask_(options_.num_stripes - 1) {
  const sparse_internal::StripeConfig config = StripeConfigFor();
  stripes_.reserve(options_.num_stripes);
  for (uint32_t s = 0; s < options_.num_stripes; ++s) {
    stripes_.push_back(std::make_unique<LockedStripe>(config));
  }
}

sparse_internal::StripeConfig SparseTable::StripeConfigFor() const {
  sparse_internal::StripeConfig c;
  c.dim = options_.dim;
  c.state_floats = options_.state_floats_per_row;
  c.admission_count = options_.admission_count;
  c.lru = options_.lru;
  c.budget_bytes = options_.memory_budget_bytes / options_.num_stripes;
  c.slab_rows_log2 = Log2(options_.slab_rows);
  c.init = &options_.init;
  return c;
}

absl::Status SparseTable::Error(absl::StatusCode code,
                                absl::string_view what) const {
  return absl::Status(
      code, absl::StrCat("sparse table '", options_.name, "': ", what));
}

absl::Status SparseTable::CheckId(uint64_t id, size_t index,
                                  absl::string_view field) const {
  if (options_.id_bound == 0 || id < options_.id_bound) return absl::OkStatus();
  return Error(
      absl::StatusCode::kInvalidArgument,
      absl::StrCat(field, "[", index, "] = ", id, " is out of range (id_bound ",
                   options_.id_bound, ")"));
}

absl::Status SparseTable::Pull(absl::Span<const uint64_t> ids,
                               absl::Span<float> out) {
  const uint32_t dim = options_.dim;
  if (out.size() != ids.size() * dim) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("out has ", out.size(), " floats, want ",
                              ids.size(), " ids x dim ", dim));
  }
  std::vector<uint64_t> hashes(ids.size());
  std::vector<uint32_t> stripe_of(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    PS_RETURN_IF_ERROR(CheckId(ids[i], i, "ids"));
    hashes[i] = RowHash(ids[i]);
    stripe_of[i] = StripeOf(hashes[i]);
  }
  const sparse_internal::StripeGroups g =
      sparse_internal::GroupByStripe(stripe_of, options_.num_stripes);
  std::vector<uint32_t> missing;
  Pipeline(
      Segments(g.begin), /*lock=*/true,
      [&](size_t r) { return hashes[g.order[r]]; },
      [&](const Segment& seg) {
        LockedStripe& stripe = *stripes_[seg.stripe];
        {
          absl::ReaderMutexLock lock(&stripe.mu);
          stripe.data.ReadMany(ids.data(), hashes.data(),
                               g.order.data() + seg.begin, seg.end - seg.begin,
                               out.data(), &missing);
        }
        stripe.rows_pulled.fetch_add(seg.end - seg.begin,
                                     std::memory_order_relaxed);
      });
  for (uint32_t i : missing) {
    options_.init.Fill(ids[i], out.subspan(size_t{i} * dim, dim));
  }
  return absl::OkStatus();
}

absl::Status SparseTable::Push(absl::Span<const uint64_t> ids,
                               absl::Span<const float> grads, uint64_t step,
                               UpdateFn update) {
  const uint32_t dim = options_.dim;
  if (grads.size() != ids.size() * dim) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("grads has ", grads.size(), " floats, want ",
                              ids.size(), " ids x dim ", dim));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    PS_RETURN_IF_ERROR(CheckId(ids[i], i, "ids"));
  }
  if (const int64_t k = FirstNonFinite(BytesOf(grads)); k >= 0) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("grads[", k, "] is ", grads[k], " (id ",
                              ids[k / dim], ", element ", k % dim, ")"));
  }
  sparse_internal::MergedPush m =
      sparse_internal::MergePush(ids, grads, dim, stripe_mask_);
  // Only sums can overflow: every other row is a copy of checked floats.
  for (uint32_t r : m.summed) {
    const float* g = m.grads.get() + size_t{r} * dim;
    for (uint32_t e = 0; e < dim; ++e) {
      if (Finite(g[e])) continue;
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("the summed gradient of duplicate id ",
                                m.ids[r], " overflows (element ", e, ")"));
    }
  }
  const bool all_or_nothing = options_.memory_budget_bytes > 0 && !options_.lru;
  if (!all_or_nothing) {
    Pipeline(
        Segments(m.begin), /*lock=*/true, [&](size_t r) { return m.hashes[r]; },
        [&](const Segment& seg) {
          absl::MutexLock lock(&stripes_[seg.stripe]->mu);
          PushSegment(m, seg, step, update);
        });
    return absl::OkStatus();
  }
  return PushAllOrNothing(m, step, update);
}

absl::Status SparseTable::PushAllOrNothing(const sparse_internal::MergedPush& m,
                                           uint64_t step, UpdateFn update)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const uint64_t share = options_.memory_budget_bytes / options_.num_stripes;
  std::vector<uint32_t> touched;
  for (uint32_t s = 0; s < options_.num_stripes; ++s) {
    if (m.begin[s] != m.begin[s + 1]) touched.push_back(s);
  }
  // Ascending stripe order: two pushes never wait on each other in a cycle.
  for (uint32_t s : touched) stripes_[s]->mu.Lock();
  auto span = [&](const std::vector<uint64_t>& v, uint32_t s) {
    return absl::MakeConstSpan(v).subspan(m.begin[s],
                                          m.begin[s + 1] - m.begin[s]);
  };
  absl::Status status;
  for (uint32_t s : touched) {
    const size_t after =
        stripes_[s]->data.BytesAfterPush(span(m.ids, s), span(m.hashes, s));
    if (after > share) {
      status = Error(absl::StatusCode::kResourceExhausted,
                     absl::StrCat("memory budget reached: the push needs ",
                                  after, " bytes in stripe ", s,
                                  ", whose share of "
                                  "memory_budget_bytes ",
                                  options_.memory_budget_bytes, " is ", share,
                                  " (no lru eviction; table unchanged)"));
      break;
    }
  }
  if (status.ok()) {
    Pipeline(
        Segments(m.begin), /*lock=*/false,
        [&](size_t r) { return m.hashes[r]; },
        [&](const Segment& seg) { PushSegment(m, seg, step, update); });
  }
  for (auto it = touched.rbegin(); it != touched.rend(); ++it) {
    stripes_[*it]->mu.Unlock();
  }
  return status;
}

void SparseTable::PushSegment(const sparse_internal::MergedPush& m,
                              const Segment& seg, uint64_t step,
                              UpdateFn update) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const size_t n = seg.end - seg.begin;
  stripes_[seg.stripe]->data.Push(
      absl::MakeConstSpan(m.ids).subspan(seg.begin, n),
      absl::MakeConstSpan(m.hashes).subspan(seg.begin, n),
      m.grads.get() + size_t{seg.begin} * options_.dim, step, update);
}

size_t SparseTable::EvictExpired(uint64_t now_step) {
  if (options_.ttl_steps == 0) return 0;
  size_t evicted = 0;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    evicted += stripe->data.EvictExpired(now_step, options_.ttl_steps);
  }
  return evicted;
}

uint64_t SparseTable::bytes_used() const {
  uint64_t bytes = 0;
  for (const auto& stripe : stripes_) {
    absl::ReaderMutexLock lock(&stripe->mu);
    bytes += stripe->data.bytes();
  }
  return bytes;
}

SparseTable::Stats SparseTable::GetStats() const {
  Stats st;
  st.budget_bytes = options_.memory_budget_bytes;
  sparse_internal::TopHotIds hot(options_.hot_ids);
  for (const auto& stripe : stripes_) {
    st.rows_pulled += stripe->rows_pulled.load(std::memory_order_relaxed);
    absl::ReaderMutexLock lock(&stripe->mu);
    const sparse_internal::Stripe& d = stripe->data;
    st.rows += d.rows();
    st.pending_admission += d.pending();
    st.bytes_used += d.bytes();
    const sparse_internal::StripeCounters& c = d.counters();
    st.admissions += c.admissions;
    st.ttl_evictions += c.ttl_evictions;
    st.lru_evictions += c.lru_evictions;
    st.dropped += c.dropped;
    st.rows_pushed += c.rows_pushed;
    if (options_.hot_ids > 0) d.OfferHottest(&hot);
  }
  st.hottest = std::move(hot).Take();
  return st;
}

}  // namespace ps
