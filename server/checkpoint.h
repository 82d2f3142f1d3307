// Shard checkpoints: the file format and the directory that holds them.
// Transport-free and lock-free; server/shard.h decides when to checkpoint
// and what a restored job may accept.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStore> store,
//                       CheckpointStore::Open("/var/lib/psd/ckpt", shard_id));
//   CheckpointEncoder enc(shard_id, registration, active, *optimizer);
//   for (chunk : chunks) { lock chunk; enc.AddChunk(chunk.state); }
//   PS_RETURN_IF_ERROR(
//       store->Write(job_id, seq, std::move(enc).Finish(seq, step)).status());
//   ...after a restart...
//   PS_ASSIGN_OR_RETURN(CheckpointStore::Loaded l, store->LoadLatest(job_id));
//
// A checkpoint holds everything one shard needs to resume one job exactly:
// the job's RegisterJobRequest (spec, placement, num_workers), its
// membership, and per local chunk its values, optimizer state, version and
// duplicate-detection state (BSP: which workers pushed the pending step and
// their buffered gradients; ASP/SSP: each worker's next unapplied step).
//
// File: <dir>/<job>.shard<N>.<sequence, 12 digits>.ckpt, where <job> is the
// job id with every byte outside [A-Za-z0-9_-] written as %XX, so several
// shards may share one directory. Layout (integers little-endian):
//
//   offset  size  field
//        0     8  magic "PSCKPT\r\n"
//        8     4  format version (1)
//       12     4  shard id
//       16     8  sequence (1, 2, ... per job and shard)
//       24     8  step (BSP: lowest chunk version; ASP/SSP: the slowest
//                 active worker's applied steps)
//       32     8  payload bytes
//       40     4  CRC32C of bytes [0, 40) followed by the payload
//       44     -  payload: registration, membership, chunks; format 2
//                 adds the tables reference: bytes u64, CRC32C u32 of the
//                 companion tables file
//
// Sparse tables (a job with JobSpec.tables): format 2, and a companion file
// <dir>/<job>.shard<N>.<sequence>.tables holding a 24-byte header (magic
// "PSTABLE\n", format u32 = 1, shard u32, sequence u64) and then the
// JobTables::Save stream. It is written (atomically, as below) before the
// .ckpt file, which names its size and CRC: the .ckpt is the commit point.
// A crash between the two leaves a tables file without its .ckpt, which
// loading ignores and the next write deletes; a tables file that does not
// match its .ckpt (size, CRC, header, or a stream its job rejects) makes
// that checkpoint unusable, and loading falls back to the previous pair.
// Jobs without tables write format 1, byte for byte as before.
//
// Incremental tables checkpoints (CheckpointSpec.tables_full_every): the
// tables file of an increment has header format 2, 44 bytes: magic, format
// u32 = 2, shard u32, sequence u64, then its base: the sequence u64, bytes
// u64 and CRC32C u32 of the tables file it applies to (the previous
// checkpoint's, full or an increment itself), and then a JobTables stream
// of format 2. A full one keeps header format 1. Loading a checkpoint
// whose tables are an increment reads its chain back to a full one, each
// file checked against the size and CRC its successor names; a missing or
// torn file in the chain makes the checkpoint unusable, and loading falls
// back to the previous one (whose chain may be intact). Retention keeps the
// newest kCheckpointsKept checkpoints and every checkpoint their chains
// need (at most tables_full_every - 1 more).
//
// Writes are atomic: "<file>.tmp", fsync, rename, fsync of the directory; a
// crash leaves either the old or the new file, never a partial one. Reads
// check the length and the CRC before parsing, and every parsed field is
// bounds-checked, so a truncated or corrupt file is rejected with an error
// naming it, never a crash.
#ifndef SERVER_CHECKPOINT_H_
#define SERVER_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"
#include "server/chunk_state.h"
#include "server/optimizer.h"
#include "server/sparse/byte_stream.h"

namespace ps {

// Checkpoints kept per job and shard: the newest, and the one before it in
// case the newest turns out unreadable.
inline constexpr int kCheckpointsKept = 2;

// Size of the fixed header in front of the payload.
inline constexpr size_t kCheckpointHeaderBytes = 44;

// CRC32C (Castagnoli) of `data`, continuing from `crc` (0 to start).
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);

// What a checkpoint says about its companion tables file.
struct TablesRef {
  uint64_t bytes = 0;  // the whole file, header included
  uint32_t crc = 0;    // CRC32C of the whole file
};

// The tables file an increment applies to (its header names it).
struct TablesBase {
  uint64_t sequence = 0;
  TablesRef ref;
};

// One job's state on one shard, decoded.
struct JobCheckpoint {
  uint32_t shard_id = 0;
  uint64_t sequence = 0;
  uint64_t step = 0;
  // num_workers is always set (resolved from the spec when it was 0).
  RegisterJobRequest registration;
  // Membership: active[r] != 0 when rank r counts toward the quorum.
  std::vector<uint8_t> active;
  // This shard's chunks, in placement order. `placement` is the
  // registration's entry; BSP gradients are sized only for pushed workers.
  std::vector<ChunkState> chunks;
  // Set when the job's sparse tables are in the companion file.
  std::optional<TablesRef> tables;
};

// Builds a checkpoint file chunk by chunk, so that the shard copies each
// chunk under that chunk's lock alone. Not thread-safe.
class CheckpointEncoder {
 public:
  // `registration` must have num_workers set; `active` has num_workers
  // entries; `optimizer` is the job's (it serializes the slot state).
  // Borrowed only for the constructor, except `optimizer`, which must
  // outlive the encoder.
  CheckpointEncoder(uint32_t shard_id, const RegisterJobRequest& registration,
                    absl::Span<const uint8_t> active,
                    const Optimizer& optimizer);

  // Appends one chunk (a copy: the caller may release its lock after).
  // Call once per local chunk, in placement order.
  void AddChunk(const ChunkState& chunk);

  // Fills in the header and returns the whole file: format 2 naming the
  // companion tables file when `tables` is set, else format 1.
  std::string Finish(uint64_t sequence, uint64_t step,
                     std::optional<TablesRef> tables = std::nullopt) &&;

 private:
  const uint32_t shard_id_;
  const uint32_t num_workers_;
  const Optimizer& optimizer_;
  std::string out_;           // header space, then the payload
  size_t num_chunks_at_ = 0;  // where the chunk count goes
  uint32_t num_chunks_ = 0;
};

// The whole file for `checkpoint` (a convenience over CheckpointEncoder).
// INVALID_ARGUMENT when the registration's optimizer spec is bad.
absl::StatusOr<std::string> EncodeCheckpoint(const JobCheckpoint& checkpoint);

// Parses and validates a whole file. INVALID_ARGUMENT (DATA_LOSS for a
// truncated file or a checksum mismatch) saying what is wrong; the caller
// names the file.
absl::StatusOr<JobCheckpoint> DecodeCheckpoint(absl::string_view bytes);

// The checkpoint files of one shard in one directory. Thread-safe: methods
// are const and touch only the files of the job they are given; callers
// serialize Write/Remove of the same job. Every method blocks on file I/O.
class CheckpointStore {
 public:
  // Creates `dir` when missing and removes temporaries of `shard_id` left
  // by a crash in the middle of a write. INVALID_ARGUMENT naming the
  // directory when it cannot be created or is not a directory.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Open(
      std::string dir, uint32_t shard_id);

  // For readers that are not the shard (psctl export): opens an existing
  // directory without creating it or removing anything, so a live psd's
  // writes in progress are left alone. INVALID_ARGUMENT naming `dir` when
  // it is missing or not a directory.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> OpenForReading(
      std::string dir, uint32_t shard_id);

  // The shard ids with at least one checkpoint in `dir`, sorted.
  // INVALID_ARGUMENT naming `dir` when it cannot be listed.
  static absl::StatusOr<std::vector<uint32_t>> ShardsIn(const std::string& dir);

  const std::string& dir() const { return dir_; }
  uint32_t shard_id() const { return shard_id_; }

  // Where checkpoint `sequence` of `job_id` lives.
  std::string PathFor(absl::string_view job_id, uint64_t sequence) const;

  // Writes `bytes` as checkpoint `sequence` of `job_id` atomically (see the
  // file comment), then deletes the job's files older than the newest
  // kCheckpointsKept. Returns the path. On error nothing new is left behind
  // and the older checkpoints are untouched.
  absl::StatusOr<std::string> Write(absl::string_view job_id, uint64_t sequence,
                                    absl::string_view bytes) const;

  // Where the tables file of checkpoint `sequence` of `job_id` lives.
  std::string TablesPathFor(absl::string_view job_id, uint64_t sequence) const;

  // Writes the companion tables file of checkpoint `sequence` of `job_id`
  // atomically (".tmp", fsync, rename, fsync of the directory), `save`
  // streaming the tables into it. Call before Write() of the same
  // sequence and pass the result to the encoder's Finish. On error nothing
  // is left behind (errors of `save` are returned as they are). With
  // `base` the file is an increment on that tables file (format 2).
  absl::StatusOr<TablesRef> WriteTables(
      absl::string_view job_id, uint64_t sequence,
      absl::FunctionRef<absl::Status(ByteSink&)> save,
      std::optional<TablesBase> base = std::nullopt) const;

  // Reads a tables file front to back, checking its header at open and
  // its size and CRC at Finish. Blocks on file I/O.
  class TablesReader : public ByteSource {
   public:
    ~TablesReader() override;
    // kDataLoss naming the file past its end.
    absl::Status Read(size_t n, char* out) override;
    // OK when every byte was read and the CRC is the one the .ckpt names;
    // DATA_LOSS naming the file otherwise.
    absl::Status Finish();
    const std::string& path() const { return path_; }
    // Set for an increment: the tables file it applies to.
    const std::optional<TablesBase>& base() const { return base_; }

   private:
    friend class CheckpointStore;
    TablesReader(std::string path, int fd, TablesRef ref);
    absl::Status Fill();

    const std::string path_;
    const int fd_;
    const TablesRef ref_;
    std::string buf_;
    size_t at_ = 0;      // next unread byte of buf_
    uint64_t read_ = 0;  // bytes read from the file
    uint32_t crc_ = 0;   // of the bytes read from the file
    std::optional<TablesBase> base_;
  };
  // Opens the tables file of `checkpoint` (of `job_id`, which must have
  // checkpoint.tables set) positioned after its header. DATA_LOSS naming
  // the file when it is missing, of another size than the .ckpt says, or
  // its header does not match.
  absl::StatusOr<std::unique_ptr<TablesReader>> OpenTables(
      absl::string_view job_id, const JobCheckpoint& checkpoint) const;

  // The tables of `checkpoint` (of `job_id`, with checkpoint.tables set)
  // as a chain: its tables file, and when that is an increment the files
  // it applies to back to a full one. Calls restore(full, increments in
  // order) on them, then checks every file's size and CRC (Finish). An
  // error of a file (missing, of another size or CRC than its successor
  // names, a header that does not match, or what `restore` returns) is
  // DATA_LOSS or restore's code, naming the checkpoint's tables file and,
  // for a chain, the one at fault where known.
  using RestoreTablesFn = absl::FunctionRef<absl::Status(
      ByteSource& full, absl::Span<ByteSource* const> increments)>;
  absl::Status ReadTablesChain(absl::string_view job_id,
                               const JobCheckpoint& checkpoint,
                               RestoreTablesFn restore) const;

  // Ids of the jobs with at least one checkpoint of this shard, sorted.
  absl::StatusOr<std::vector<std::string>> ListJobs() const;

  struct Loaded {
    JobCheckpoint checkpoint;
    std::string path;
    // Newer files that were rejected, each error naming its file.
    std::vector<absl::Status> rejected;
  };
  // Called on each candidate, newest first; an error rejects it like a
  // corrupt file. It may move the contents out of `checkpoint` (Loaded's
  // copy then holds what it left). The shard restores the job here, so a
  // bad tables file falls back to the previous checkpoint.
  using Accept = std::function<absl::Status(JobCheckpoint& checkpoint,
                                            const std::string& path)>;
  // The newest checkpoint of `job_id` that reads back intact, also checking
  // that it belongs to this shard and to this job, and that `accept` (when
  // set) takes it. NOT_FOUND when there is none; otherwise, when every
  // file is bad, DATA_LOSS listing each file and what is wrong with it.
  absl::StatusOr<Loaded> LoadLatest(absl::string_view job_id,
                                    const Accept& accept = nullptr) const;

  // Reads and decodes one file; errors name it.
  absl::StatusOr<JobCheckpoint> ReadFile(const std::string& path) const;

  // Deletes every checkpoint of `job_id` (of this shard), tables files
  // included.
  absl::Status Remove(absl::string_view job_id) const;

 private:
  CheckpointStore(std::string dir, uint32_t shard_id)
      : dir_(std::move(dir)), shard_id_(shard_id) {}

  // The job's files of this shard named "...<suffix>" (default: the
  // checkpoints), by sequence, oldest first.
  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> Files(
      absl::string_view job_id, absl::string_view suffix = ".ckpt") const;
  // Deletes the job's tables files that no kept checkpoint names.
  void RemoveOrphanTables(absl::string_view job_id) const;
  // Deletes the job's checkpoints but the newest kCheckpointsKept, `keep`
  // and those the kept ones' tables chains need.
  void RemoveOld(absl::string_view job_id, const std::string& keep) const;
  // The tables file of checkpoint `sequence` with size and CRC `ref`,
  // positioned after its header.
  absl::StatusOr<std::unique_ptr<TablesReader>> OpenTablesAt(
      absl::string_view job_id, uint64_t sequence, TablesRef ref) const;
  // The base sequence an increment's tables file names (its header only);
  // nullopt for a full one or one that cannot be read.
  std::optional<uint64_t> BaseOf(absl::string_view job_id,
                                 uint64_t sequence) const;

  const std::string dir_;
  const uint32_t shard_id_;
};

}  // namespace ps

#endif  // SERVER_CHECKPOINT_H_
