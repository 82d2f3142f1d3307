#include "worker/trainer/ctr_data_tsv.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<CtrTsvCount> CountCtrTsvRows(
    const std::string& path, const std::string& what, uint64_t max_lines,
    uint32_t num_workers, absl::Duration log_interval, int logged_bad_rows) {
  if (num_workers == 0) {
    return absl::InvalidArgumentError("num_workers: must be >= 1");
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTsvReader> reader,
                      CtrTsvReader::Open(path));
  CtrTsvCount count;
  count.good_per_rank.assign(num_workers, 0);
  CtrExample e;
  const Clock::time_point start = Clock::now();
  const auto interval = absl::ToChronoNanoseconds(log_interval);
  Clock::time_point next_log = start + interval;
  spdlog::info("counting {} {} ({})", what, path,
               max_lines > 0 ? absl::StrCat("first ", max_lines, " lines")
                             : std::string("every line"));
  while (max_lines == 0 || reader->line() < max_lines) {
    absl::StatusOr<bool> got = reader->Next(&e);
    if (got.ok() && !*got) break;  // end of file
    if (got.ok()) {
      ++count.good_per_rank[(reader->line() - 1) % num_workers];
    } else if (absl::IsInvalidArgument(got.status())) {
      if (count.bad_rows < static_cast<uint64_t>(logged_bad_rows)) {
        spdlog::warn("{}: skipping bad row: {}", what,
                     std::string(got.status().message()));
      }
      ++count.bad_rows;
    } else {
      return got.status();
    }
    // The clock only every 64k lines: a line takes well under a microsecond.
    if ((reader->line() & 0xffff) == 0 && Clock::now() >= next_log) {
      spdlog::info("counting {}: {} lines, {} bad, {:.0f} s", what,
                   reader->line(), count.bad_rows, SecondsSince(start));
      next_log = Clock::now() + interval;
    }
  }
  count.lines = reader->line();
  spdlog::info("counted {} {}: {} lines, {} bad rows skipped, {:.1f} s", what,
               path, count.lines, count.bad_rows, SecondsSince(start));
  return count;
}

absl::StatusOr<std::unique_ptr<CtrTsvSource>> CtrTsvSource::Create(
    const Options& options) {
  const CtrDataOptions& d = options.data;
  if (options.batch_size == 0) {
    return absl::InvalidArgumentError("data.batch_size: must be >= 1");
  }
  if (d.num_workers == 0 || d.rank >= d.num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank: %d is not below num_workers %d", d.rank, d.num_workers));
  }
  PS_ASSIGN_OR_RETURN(
      CtrTsvCount train,
      CountCtrTsvRows(options.train_path, "train_file", options.max_lines,
                      d.num_workers, d.count_log_interval, d.logged_bad_rows));
  const uint64_t per_rank =
      *std::min_element(train.good_per_rank.begin(), train.good_per_rank.end());
  if (per_rank < options.batch_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data.train_file: %s has %d good rows in %d lines (%d bad), fewest "
        "%d per worker over %d workers; need a batch of %d each",
        options.train_path, train.lines - train.bad_rows, train.lines,
        train.bad_rows, per_rank, d.num_workers, options.batch_size));
  }
  uint64_t test_rows = 0;
  if (d.test_set) {
    PS_ASSIGN_OR_RETURN(
        CtrTsvCount test,
        CountCtrTsvRows(options.test_path, "test_file", /*max_lines=*/0,
                        /*num_workers=*/1, d.count_log_interval,
                        d.logged_bad_rows));
    test_rows = test.good_per_rank[0];
    if (test_rows == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("data.test_file: %s has no good row in %d lines",
                          options.test_path, test.lines));
    }
  }
  const uint64_t steps = per_rank / options.batch_size;
  return std::unique_ptr<CtrTsvSource>(
      new CtrTsvSource(options, std::move(train), test_rows, steps));
}

CtrTsvSource::CtrTsvSource(Options options, CtrTsvCount train_count,
                           uint64_t test_rows, uint64_t steps_per_epoch)
    : options_(std::move(options)),
      train_count_(std::move(train_count)),
      test_rows_(test_rows),
      steps_per_epoch_(steps_per_epoch) {}

absl::Status CtrTsvSource::Reopen() {
  train_.reset();
  PS_ASSIGN_OR_RETURN(train_, CtrTsvReader::Open(options_.train_path));
  return absl::OkStatus();
}

absl::Status CtrTsvSource::NextOwnRow(CtrExample* out) {
  const uint32_t workers = options_.data.num_workers;
  for (;;) {
    const uint64_t line = train_->line();  // 0-based index of the next line
    if (line >= train_count_.lines) {
      return absl::DataLossError(absl::StrFormat(
          "%s: rank %d ran out of rows at line %d; the file changed since "
          "it was counted",
          options_.train_path, options_.data.rank, line));
    }
    absl::StatusOr<bool> got = line % workers == options_.data.rank
                                   ? train_->Next(out)
                                   : train_->Skip();
    if (!got.ok() && !absl::IsInvalidArgument(got.status())) {
      return got.status();
    }
    if (got.ok() && !*got) {
      return absl::DataLossError(absl::StrFormat(
          "%s: ends at line %d, counted %d lines; the file changed since it "
          "was counted",
          options_.train_path, line, train_count_.lines));
    }
    // A bad row (counted and logged by the count pass) is skipped.
    if (got.ok() && line % workers == options_.data.rank) {
      return absl::OkStatus();
    }
  }
}

absl::Status CtrTsvSource::TrainBatch(uint64_t t, CtrBatch* batch) {
  absl::Status s = ReadBatch(t, batch);
  // After a failure the stream's position is unknown: the next call starts
  // over from the top.
  next_step_ = s.ok() ? t + 1 : kNoStep;
  return s;
}

absl::Status CtrTsvSource::ReadBatch(uint64_t t, CtrBatch* batch) {
  const uint64_t b = options_.batch_size;
  const uint64_t k = t % steps_per_epoch_;
  if (train_ == nullptr || t != next_step_ || k == 0) {
    // A new epoch, or a jump (a restart at start_step): from the top.
    PS_RETURN_IF_ERROR(Reopen());
    for (uint64_t i = 0; i < k * b; ++i) {
      PS_RETURN_IF_ERROR(NextOwnRow(&example_));
    }
  }
  batch->Resize(b);
  for (uint64_t i = 0; i < b; ++i) {
    PS_RETURN_IF_ERROR(NextOwnRow(&example_));
    batch->Set(i, example_);
  }
  return absl::OkStatus();
}

absl::Status CtrTsvSource::ForEachTestBatch(size_t max_batch,
                                            const TestBatchFn& fn) {
  if (!options_.data.test_set) {
    return absl::FailedPreconditionError("this rank has no test set");
  }
  if (max_batch == 0) {
    return absl::InvalidArgumentError("max_batch: must be >= 1");
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTsvReader> reader,
                      CtrTsvReader::Open(options_.test_path));
  CtrBatch batch;
  batch.Resize(max_batch);
  size_t n = 0;
  uint64_t rows = 0;
  for (;;) {
    absl::StatusOr<bool> got = reader->Next(&example_);
    if (!got.ok() && !absl::IsInvalidArgument(got.status())) {
      return got.status();
    }
    const bool end = got.ok() && !*got;
    if (got.ok() && *got) {
      batch.Set(n++, example_);
      ++rows;
    }
    if (n == max_batch || (end && n > 0)) {
      batch.Resize(n);
      PS_RETURN_IF_ERROR(fn(batch, /*teacher=*/nullptr));
      batch.Resize(max_batch);
      n = 0;
    }
    if (end) break;
  }
  if (rows != test_rows_) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %d good rows, counted %d; the file changed since it was counted",
        options_.test_path, rows, test_rows_));
  }
  return absl::OkStatus();
}

}  // namespace ps
