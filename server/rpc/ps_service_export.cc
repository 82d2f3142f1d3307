// PsService::ExportRows: a sparse table's rows streamed to the client
// (psctl export). The Shard reads the table on a thread of the call's own
// and hands each message to the reactor, which keeps at most one write in
// flight: the reader runs one message ahead of the client and waits for
// it, so a slow client holds two messages of memory, not the table.
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "server/rpc/ps_service.h"

namespace ps {
namespace {

// How long a message may wait for the client to take the previous one.
constexpr absl::Duration kWriteTimeout = absl::Seconds(60);

class ExportRowsReactor final : public grpc::ServerWriteReactor<SparseRows> {
 public:
  // Borrows `shard`, which outlives the server. Starts reading at once.
  ExportRowsReactor(const Shard* shard, ExportRowsRequest req)
      : shard_(shard), req_(std::move(req)) {
    reader_ = std::thread([this] { Run(); });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock l(&mu_);
    in_flight_ = false;
    if (!ok) broken_ = true;
  }
  void OnCancel() override {
    absl::MutexLock l(&mu_);
    broken_ = true;
  }
  void OnDone() override {
    // gRPC may run OnDone on the reader's own thread (inside Finish), after
    // which the reader touches nothing of this object.
    if (reader_.get_id() == std::this_thread::get_id()) {
      reader_.detach();
    } else {
      reader_.join();
    }
    delete this;
  }

 private:
  // Waits (bounded) until no write is in flight or the stream broke.
  bool AwaitWritable() {
    auto writable = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !in_flight_ || broken_;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&writable), kWriteTimeout);
  }

  absl::Status Send(const SparseRows& rows) {
    {
      absl::MutexLock l(&mu_);
      if (!AwaitWritable()) {
        return absl::DeadlineExceededError(
            absl::StrCat("export of table \"", req_.table(),
                         "\": the client took no rows "
                         "for ",
                         absl::FormatDuration(kWriteTimeout)));
      }
      if (broken_) return absl::CancelledError("the client went away");
      in_flight_ = true;
    }
    current_ = rows;  // no write in flight: the reactor does not read it
    // Outside mu_: gRPC may call OnWriteDone on this thread.
    StartWrite(&current_);
    return absl::OkStatus();
  }

  void Run() {
    absl::Status st = shard_->ExportRows(
        req_, [this](const SparseRows& rows) { return Send(rows); });
    {
      absl::MutexLock l(&mu_);
      AwaitWritable();  // Finish after the last write (or its timeout)
    }
    Finish(ToGrpcStatus(st));
  }

  const Shard* const shard_;
  const ExportRowsRequest req_;
  SparseRows current_;  // the message being written
  absl::Mutex mu_;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

// A stream finished at once with `status`.
class FailedWrite final : public grpc::ServerWriteReactor<SparseRows> {
 public:
  explicit FailedWrite(const absl::Status& status) {
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<SparseRows>* PsService::ExportRows(
    grpc::CallbackServerContext* ctx, const ExportRowsRequest* req) {
  absl::Status auth = security_->CheckToken(*ctx);
  if (!auth.ok()) return new FailedWrite(auth);
  return new ExportRowsReactor(shard_, *req);
}

}  // namespace ps
