#include "server/internal/reshard_tables.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "core/sparse_ids.h"
#include "server/sparse/byte_stream.h"

namespace ps {
namespace internal {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The rows' shards under `p`: table_shards, or every shard.
std::vector<uint32_t> Owners(const Placement& p) {
  if (p.table_shards_size() > 0) {
    return {p.table_shards().begin(), p.table_shards().end()};
  }
  std::vector<uint32_t> all(p.num_shards());
  for (uint32_t s = 0; s < p.num_shards(); ++s) all[s] = s;
  return all;
}

absl::Status CheckRowsRequest(const Job& job, const FetchChunksRequest& req) {
  if (job.tables == nullptr) {
    return Invalid("rows_for_shard",
                   absl::StrCat("job ", job.id, " has no sparse tables"));
  }
  if (req.chunk_ids_size() > 0) {
    return Invalid("chunk_ids", "set with rows_for_shard (ask for one)");
  }
  if (req.table_shards_size() == 0) {
    return Invalid("table_shards", "empty (the new placement's rows' shards)");
  }
  for (int i = 0; i < req.table_shards_size(); ++i) {
    if (req.table_shards(i) >= job.placement.num_shards()) {
      return Invalid(absl::StrCat("table_shards[", i, "]"),
                     absl::StrCat(req.table_shards(i), " is past the ",
                                  job.placement.num_shards(), " shards"));
    }
  }
  if (!absl::c_linear_search(req.table_shards(), req.rows_for_shard())) {
    return Invalid("rows_for_shard",
                   absl::StrCat(req.rows_for_shard(), " is not among [",
                                absl::StrJoin(req.table_shards(), ", "), "]"));
  }
  if (req.max_piece_bytes() > kMaxRowPieceBytes) {
    return Invalid(
        "max_piece_bytes",
        absl::StrCat(req.max_piece_bytes(), " is over ", kMaxRowPieceBytes));
  }
  return absl::OkStatus();
}

// The stream of `job`'s rows owned by `target` under `owners` (paused and
// quiesced: the tables check it).
absl::StatusOr<std::shared_ptr<const std::string>> RowsFor(
    const Job& job, uint32_t num_shards, const std::vector<uint32_t>& owners,
    uint32_t target) {
  auto bytes = std::make_shared<std::string>();
  StringSink sink(bytes.get());
  PS_RETURN_IF_ERROR(job.tables->SaveRowsWhere(
      [&](uint64_t id) { return RowOwner(id, owners, num_shards) == target; },
      sink));
  return std::shared_ptr<const std::string>(std::move(bytes));
}

}  // namespace

absl::Status CopyRows(Job& job, uint32_t shard_id,
                      const FetchChunksRequest& req,
                      FetchChunksResponse* resp) {
  resp->Clear();
  PS_RETURN_IF_ERROR(CheckRowsRequest(job, req));
  const std::vector<uint32_t> owners(req.table_shards().begin(),
                                     req.table_shards().end());
  const std::string key =
      absl::StrCat(req.rows_for_shard(), ":", absl::StrJoin(owners, ","));
  std::shared_ptr<const std::string> stream;
  uint64_t step = 0;
  {
    absl::MutexLock l(&job.replacement.mu);
    const Replacement& r = job.replacement;
    if (req.epoch() == 0 || r.epoch != req.epoch() || r.committed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "epoch: job ", job.id, " is not paused for placement epoch ",
          req.epoch(), " on shard ", shard_id));
    }
    auto it = r.row_streams.find(key);
    if (it != r.row_streams.end()) stream = it->second;
    step = r.step;
  }
  if (stream == nullptr) {
    // Made without the mutex (a PAUSE or ABORT need not wait for it); kept
    // unless the pause moved meanwhile (a PREPARE starting here moves the
    // generation, not the pause: the rows stay as they are).
    PS_ASSIGN_OR_RETURN(stream, RowsFor(job, job.placement.num_shards(), owners,
                                        req.rows_for_shard()));
    absl::MutexLock l(&job.replacement.mu);
    Replacement& r = job.replacement;
    if (r.step != step || r.epoch != req.epoch() || r.committed) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job.id, " was paused again or its pause lifted ",
                       "on shard ", shard_id, " while its rows were copied"));
    }
    r.row_streams.emplace(key, stream);
  }
  if (req.rows_offset() > stream->size()) {
    return Invalid("rows_offset",
                   absl::StrCat(req.rows_offset(), " is past the stream's ",
                                stream->size(), " bytes"));
  }
  const uint64_t piece =
      req.max_piece_bytes() == 0 ? kRowPieceBytes : req.max_piece_bytes();
  resp->set_rows(stream->substr(req.rows_offset(), piece));
  resp->set_rows_total(stream->size());
  return absl::OkStatus();
}

namespace {

// The stream shard `from` holds for `self` under `req`'s placement, piece
// by piece, its size granted by `reserve` once the first piece names it;
// `*fetched` counts its bytes.
absl::StatusOr<std::string> FetchRows(const Job& old, uint32_t from,
                                      uint32_t self, const ReshardRequest& req,
                                      const FetchBatch& fetch,
                                      const ReserveRows& reserve,
                                      uint64_t* fetched) {
  FetchChunksRequest ask;
  ask.set_job_id(old.id);
  ask.set_epoch(req.epoch());
  ask.set_rows_for_shard(self);
  *ask.mutable_table_shards() = req.placement().table_shards();
  ask.set_max_piece_bytes(kRowPieceBytes);
  std::string stream;
  uint64_t total = 0;
  do {
    ask.set_rows_offset(stream.size());
    FetchChunksResponse got;
    PS_RETURN_IF_ERROR(fetch(from, ask, &got));
    if (stream.empty()) {
      total = got.rows_total();
      PS_RETURN_IF_ERROR(reserve(total));
    }
    if (got.rows_total() != total || got.rows().size() > kRowPieceBytes ||
        (got.rows().empty() && stream.size() < total) ||
        stream.size() + got.rows().size() > total) {
      return absl::DataLossError(absl::StrCat(
          "shard ", from, " answered a piece of ", got.rows().size(),
          " bytes at ", stream.size(), " of a ", got.rows_total(),
          "-byte rows stream (", total, " before)"));
    }
    stream.append(got.rows());
    *fetched += got.rows().size();
  } while (stream.size() < total);
  return stream;
}

}  // namespace

absl::StatusOr<FetchTally> BuildTables(const Job& old,
                                       const ReshardRequest& req,
                                       const FetchBatch& fetch,
                                       const ReserveRows& reserve,
                                       ReplacementPlan& plan) {
  FetchTally tally;
  JobTables* fresh = plan.job->tables.get();
  if (old.tables == nullptr || fresh == nullptr || !fresh->OwnsRows()) {
    return tally;
  }
  const uint32_t self = plan.shard_id;
  const std::vector<uint32_t> to = Owners(req.placement());
  const std::vector<uint32_t> from = Owners(old.placement);
  for (uint32_t s : from) {
    if (s != self && (s >= static_cast<uint32_t>(req.shard_addresses_size()) ||
                      req.shard_addresses(s).empty())) {
      return Invalid("shard_addresses",
                     absl::StrCat("no address of shard ", s,
                                  ", which holds rows of job ", old.id));
    }
  }
  // Every old owner's stream at once: one encodes while another is sent
  // or this shard's own is written.
  std::vector<std::string> streams(from.size());
  std::vector<absl::Status> status(from.size());
  std::vector<uint64_t> bytes(from.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < from.size(); ++i) {
    threads.emplace_back([&, i] {
      if (from[i] != self) {
        absl::StatusOr<std::string> got =
            FetchRows(old, from[i], self, req, fetch, reserve, &bytes[i]);
        if (got.ok()) streams[i] = *std::move(got);
        status[i] = got.status();
        return;
      }
      absl::StatusOr<std::shared_ptr<const std::string>> mine =
          RowsFor(old, req.placement().num_shards(), to, self);
      status[i] = mine.ok() ? reserve((*mine)->size()) : mine.status();
      if (status[i].ok()) streams[i] = **mine;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < from.size(); ++i) {
    if (!status[i].ok()) {
      return absl::Status(
          status[i].code(),
          absl::StrCat("the rows of job ", old.id, " from shard ", from[i],
                       ": ", status[i].message()));
    }
    tally.bytes += bytes[i];
    tally.chunks += from[i] != self;
  }
  std::vector<StringSource> sources(streams.begin(), streams.end());
  std::vector<ByteSource*> ptrs;
  uint64_t staged = 0;
  for (StringSource& s : sources) ptrs.push_back(&s);
  for (const std::string& s : streams) staged += s.size();
  PS_RETURN_IF_ERROR(fresh->InstallRows(ptrs));
  // The fresh tables' index and slabs may take more than their streams.
  const uint64_t used = fresh->bytes_used();
  if (used > staged) PS_RETURN_IF_ERROR(reserve(used - staged));
  return tally;
}

}  // namespace internal
}  // namespace ps
