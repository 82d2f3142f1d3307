// ctr_datagen: writes CTR examples in the binary record layout of
// worker/data/ctr_example.h, plus a sidecar <out>.json.
//
//   ctr_datagen --out=/data/ctr/test.bin --split=test --count=1000000
//   ctr_datagen --out=/data/ctr/train.bin --count=4000000 --threads=2
//   ctr_datagen --out=/data/criteo/day0.bin --tsv=/data/criteo/train.txt
//
// Synthetic mode writes examples [base + start, base + start + count) of
// CtrSyntheticGenerator, base = 0 for --split=train and kCtrTestBegin for
// --split=test, and records in the sidecar the teacher's AUC and logloss
// over exactly those examples: the best a model can reach on them.
// --unseen_train=T also reports which of them hold ids never seen (or seen
// fewer than --unseen_below times) in the training range [0, T), and the
// teacher's AUC with those ids' terms dropped.
// TSV mode converts a Criteo TSV file (rows [start, start + count), count 0
// for all); the sidecar then has no teacher.
//
// Sidecar: {"examples", "seed", "first_index", "cardinalities": [26],
// "teacher_auc", "teacher_logloss", "positive_rate", "record_bytes",
// "source", "generator": {...}, "unseen": {...}}; null where a field does not
// apply. The files are written under temporary names and renamed when
// complete. Exit status: 0 done, 2 bad flags or a bad input row, 1 any other
// failure (I/O).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/data/ctr_example.h"
#include "worker/data/ctr_synthetic.h"
#include "worker/data/ctr_tsv.h"
#include "worker/trainer/ctr_metrics.h"

ABSL_FLAG(std::string, out, "", "output file (required); sidecar: <out>.json");
ABSL_FLAG(std::string, tsv, "",
          "convert this Criteo TSV file (plain or gzip) instead of generating");
ABSL_FLAG(std::string, split, "train",
          "synthetic index base: train (0) or test (2^48)");
ABSL_FLAG(uint64_t, start, 0, "first example (offset from the split's base)");
ABSL_FLAG(uint64_t, count, 0,
          "examples to write (synthetic: required; TSV: 0 = every row)");
ABSL_FLAG(uint32_t, threads, 1, "generator threads (synthetic), >= 1");
ABSL_FLAG(bool, skip_bad_rows, false,
          "TSV: report and skip bad rows instead of stopping at the first");
ABSL_FLAG(bool, progress, true, "print progress to stderr every 2 s");
ABSL_FLAG(uint64_t, unseen_train, 0,
          "synthetic: report ids unseen in training examples [0, N); 0 = off");
ABSL_FLAG(uint32_t, unseen_below, 1,
          "with --unseen_train: ids seen fewer than this many times count as "
          "unseen (a model learns little from a handful of examples), >= 1");
// Generator parameters: defaults and ranges as CtrSyntheticConfig's.
ABSL_FLAG(uint64_t, seed, ps::CtrSyntheticConfig{}.seed, "generator seed");
ABSL_FLAG(std::string, cardinalities, "",
          "26 comma-separated field cardinalities (default: Criteo Kaggle's)");
ABSL_FLAG(double, zipf_exponent, ps::CtrSyntheticConfig{}.zipf_exponent,
          "Zipf exponent of value frequencies");
ABSL_FLAG(double, weight_stddev, ps::CtrSyntheticConfig{}.weight_stddev,
          "teacher: std of a frequent value's weight");
ABSL_FLAG(double, rank_scale, ps::CtrSyntheticConfig{}.rank_scale,
          "teacher: rank beyond which weights shrink");
ABSL_FLAG(double, dense_weight_stddev,
          ps::CtrSyntheticConfig{}.dense_weight_stddev,
          "teacher: std of the dense weights");
ABSL_FLAG(int, interaction_pairs, ps::CtrSyntheticConfig{}.interaction_pairs,
          "teacher: field pairs with an interaction term");
ABSL_FLAG(int, interaction_dim, ps::CtrSyntheticConfig{}.interaction_dim,
          "teacher: interaction vector dimension");
ABSL_FLAG(double, interaction_stddev,
          ps::CtrSyntheticConfig{}.interaction_stddev,
          "teacher: scale of each interaction term");
ABSL_FLAG(double, positive_rate, ps::CtrSyntheticConfig{}.positive_rate,
          "mean teacher probability the bias is solved for");

namespace ps {
namespace {

constexpr size_t kChunk = 1 << 16;  // examples per generation task
constexpr absl::Duration kProgressEvery = absl::Seconds(2);

struct Options {
  std::string out;
  std::string tsv;
  uint64_t first_index = 0;  // synthetic: base + start; TSV: rows skipped
  uint64_t count = 0;
  uint32_t threads = 1;
  bool skip_bad_rows = false;
  bool progress = true;
  uint64_t unseen_train = 0;
  uint32_t unseen_below = 1;
  CtrSyntheticConfig config;
};

absl::StatusOr<Options> ParseFlags() {
  Options o;
  o.out = absl::GetFlag(FLAGS_out);
  if (o.out.empty()) return absl::InvalidArgumentError("--out is required");
  o.tsv = absl::GetFlag(FLAGS_tsv);
  o.count = absl::GetFlag(FLAGS_count);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.skip_bad_rows = absl::GetFlag(FLAGS_skip_bad_rows);
  o.progress = absl::GetFlag(FLAGS_progress);
  o.unseen_train = absl::GetFlag(FLAGS_unseen_train);
  o.unseen_below = absl::GetFlag(FLAGS_unseen_below);
  if (o.unseen_below < 1) {
    return absl::InvalidArgumentError("--unseen_below must be >= 1");
  }
  if (o.threads < 1)
    return absl::InvalidArgumentError("--threads must be >= 1");
  const std::string split = absl::GetFlag(FLAGS_split);
  if (split != "train" && split != "test") {
    return absl::InvalidArgumentError(
        absl::StrCat("--split=", split, ": want train or test"));
  }
  const uint64_t start = absl::GetFlag(FLAGS_start);
  const uint64_t base = split == "test" ? kCtrTestBegin : 0;
  if (o.tsv.empty()) {
    if (o.count == 0) {
      return absl::InvalidArgumentError(
          "--count must be > 0 for synthetic data");
    }
    if (start > kCtrTestBegin || o.count > kCtrTestBegin - start) {
      return absl::InvalidArgumentError(
          "--start + --count must stay within the split (2^48 examples)");
    }
  } else if (split != "train" || o.unseen_train != 0) {
    return absl::InvalidArgumentError(
        "--split and --unseen_train apply to synthetic data, not --tsv");
  }
  o.first_index = o.tsv.empty() ? base + start : start;
  CtrSyntheticConfig& c = o.config;
  c.seed = absl::GetFlag(FLAGS_seed);
  const std::string cards = absl::GetFlag(FLAGS_cardinalities);
  if (!cards.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(cards, ',');
    if (parts.size() != kCtrCategoricalFields) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--cardinalities has %d values, want %d",
                          parts.size(), kCtrCategoricalFields));
    }
    for (int f = 0; f < kCtrCategoricalFields; ++f) {
      if (!absl::SimpleAtoi(parts[f], &c.cardinalities[f])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--cardinalities[%d] = '%s' is not a number", f, parts[f]));
      }
    }
  }
  c.zipf_exponent = absl::GetFlag(FLAGS_zipf_exponent);
  c.weight_stddev = absl::GetFlag(FLAGS_weight_stddev);
  c.rank_scale = absl::GetFlag(FLAGS_rank_scale);
  c.dense_weight_stddev = absl::GetFlag(FLAGS_dense_weight_stddev);
  c.interaction_pairs = absl::GetFlag(FLAGS_interaction_pairs);
  c.interaction_dim = absl::GetFlag(FLAGS_interaction_dim);
  c.interaction_stddev = absl::GetFlag(FLAGS_interaction_stddev);
  c.positive_rate = absl::GetFlag(FLAGS_positive_rate);
  return o;
}

// Buffered record output under a temporary name, renamed by Commit.
class RecordWriter {
 public:
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Open(std::string path) {
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
      return absl::PermissionDeniedError(
          absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
    }
    return std::unique_ptr<RecordWriter>(
        new RecordWriter(std::move(path), tmp, f));
  }
  ~RecordWriter() {
    if (file_ != nullptr) {
      std::fclose(file_);
      std::remove(tmp_.c_str());
    }
  }
  absl::Status Write(const CtrExample& e) {
    uint8_t rec[kCtrRecordBytes];
    EncodeCtrRecord(e, rec);
    if (std::fwrite(rec, 1, sizeof(rec), file_) != sizeof(rec)) {
      return absl::DataLossError(
          absl::StrCat(tmp_, ": write failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  absl::Status Commit() {
    const bool ok = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::remove(tmp_.c_str());
      return absl::DataLossError(
          absl::StrCat(path_, ": cannot complete: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  RecordWriter(std::string path, std::string tmp, FILE* f)
      : path_(std::move(path)), tmp_(std::move(tmp)), file_(f) {}
  const std::string path_;
  const std::string tmp_;
  FILE* file_;
};

absl::Status WriteText(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  const bool written =
      std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

class Progress {
 public:
  Progress(bool enabled, uint64_t total) : enabled_(enabled), total_(total) {}
  void Update(uint64_t done, bool final = false) {
    const absl::Time now = absl::Now();
    if (!enabled_ || (!final && now - last_ < kProgressEvery)) return;
    last_ = now;
    const double secs = absl::ToDoubleSeconds(now - start_);
    const double rate = secs > 0 ? done / secs : 0;
    if (total_ > 0) {
      std::fprintf(
          stderr, "ctr_datagen: %llu / %llu examples (%.1f%%), %.0f/s\n",
          static_cast<unsigned long long>(done),
          static_cast<unsigned long long>(total_), 100.0 * done / total_, rate);
    } else {
      std::fprintf(stderr, "ctr_datagen: %llu examples, %.0f/s\n",
                   static_cast<unsigned long long>(done), rate);
    }
  }

 private:
  const bool enabled_;
  const uint64_t total_;
  const absl::Time start_ = absl::Now();
  absl::Time last_ = absl::Now();
};

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.15g", v) : "null";
}

// How often each id occurs in training examples [0, n).
absl::flat_hash_map<uint64_t, uint32_t> TrainCounts(
    const CtrSyntheticGenerator& gen, uint64_t n, bool progress) {
  absl::flat_hash_map<uint64_t, uint32_t> seen;
  Progress meter(progress, n);
  CtrExample e;
  for (uint64_t i = 0; i < n; ++i) {
    gen.Generate(i, &e);
    for (uint64_t id : e.ids) ++seen[id];
    if (i % kChunk == 0) meter.Update(i);
  }
  return seen;
}

// One generated chunk: its examples and the teacher's metrics over them.
struct Chunk {
  std::vector<CtrExample> examples;
  std::vector<double> probs;
  CtrMetricsAccumulator teacher;
};

absl::Status FillChunk(const CtrSyntheticGenerator& gen, uint64_t begin,
                       size_t n, Chunk* chunk) {
  chunk->examples.resize(n);
  chunk->probs.resize(n);
  chunk->teacher.Clear();
  for (size_t i = 0; i < n; ++i) {
    gen.Generate(begin + i, &chunk->examples[i], &chunk->probs[i]);
    PS_RETURN_IF_ERROR(
        chunk->teacher.Add(chunk->probs[i], chunk->examples[i].label));
  }
  return absl::OkStatus();
}

// The sidecar's "unseen" object: examples with at least one id seen fewer
// than `below` times in training, per-field fractions, and the teacher with
// those ids' terms dropped (an oracle that knows only the other ids).
class UnseenReport {
 public:
  UnseenReport(const CtrSyntheticGenerator* gen,
               absl::flat_hash_map<uint64_t, uint32_t> counts, uint64_t train,
               uint32_t below)
      : gen_(gen), counts_(std::move(counts)), train_(train), below_(below) {}

  absl::Status Add(const CtrExample& e) {
    std::array<bool, kCtrCategoricalFields> known;
    bool any = false;
    for (int f = 0; f < kCtrCategoricalFields; ++f) {
      const auto it = counts_.find(e.ids[f]);
      known[f] = it != counts_.end() && it->second >= below_;
      if (!known[f]) {
        any = true;
        ++per_field_[f];
      }
    }
    any_ += any;
    ++examples_;
    PS_ASSIGN_OR_RETURN(double logit, gen_->TeacherLogit(e, &known));
    return seen_teacher_.Add(1.0 / (1.0 + std::exp(-logit)), e.label);
  }

  std::string Json() const {
    std::vector<std::string> fields;
    for (uint64_t c : per_field_) {
      fields.push_back(absl::StrFormat("%.6f", Fraction(c)));
    }
    const CtrMetrics m = seen_teacher_.Summary();
    return absl::StrFormat(
        "{\"train_examples\": %d, \"distinct_train_ids\": %d, "
        "\"unseen_below\": %d, "
        "\"examples_with_unseen_id\": %.6f, \"unseen_per_field\": [%s], "
        "\"teacher_auc_seen_ids_only\": %s, "
        "\"teacher_logloss_seen_ids_only\": %s}",
        train_, counts_.size(), below_, Fraction(any_),
        absl::StrJoin(fields, ", "), JsonNumber(m.auc), JsonNumber(m.logloss));
  }

 private:
  double Fraction(uint64_t c) const {
    return examples_ == 0 ? 0.0 : static_cast<double>(c) / examples_;
  }
  const CtrSyntheticGenerator* gen_;
  const absl::flat_hash_map<uint64_t, uint32_t> counts_;
  const uint64_t train_;
  const uint32_t below_;
  uint64_t examples_ = 0;
  uint64_t any_ = 0;
  std::array<uint64_t, kCtrCategoricalFields> per_field_{};
  CtrMetricsAccumulator seen_teacher_;
};

std::string GeneratorJson(const CtrSyntheticGenerator& gen) {
  const CtrSyntheticConfig& c = gen.config();
  std::vector<std::string> pairs;
  for (const auto& [a, b] : gen.interaction_pairs()) {
    pairs.push_back(absl::StrFormat("[%d, %d]", a, b));
  }
  return absl::StrFormat(
      "{\"zipf_exponent\": %s, \"weight_stddev\": %s, \"rank_scale\": %s, "
      "\"dense_weight_stddev\": %s, \"interaction_dim\": %d, "
      "\"interaction_stddev\": %s, \"interaction_pairs\": [%s], "
      "\"target_positive_rate\": %s, \"calibration_examples\": %d, "
      "\"bias\": %s}",
      JsonNumber(c.zipf_exponent), JsonNumber(c.weight_stddev),
      JsonNumber(c.rank_scale), JsonNumber(c.dense_weight_stddev),
      c.interaction_dim, JsonNumber(c.interaction_stddev),
      absl::StrJoin(pairs, ", "), JsonNumber(c.positive_rate),
      c.calibration_examples, JsonNumber(gen.bias()));
}

absl::Status RunSynthetic(const Options& o) {
  PS_ASSIGN_OR_RETURN(CtrSyntheticGenerator gen,
                      CtrSyntheticGenerator::Create(o.config));
  std::unique_ptr<UnseenReport> unseen;
  if (o.unseen_train > 0) {
    unseen = std::make_unique<UnseenReport>(
        &gen, TrainCounts(gen, o.unseen_train, o.progress), o.unseen_train,
        o.unseen_below);
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<RecordWriter> writer,
                      RecordWriter::Open(o.out));
  CtrMetricsAccumulator teacher;
  Progress meter(o.progress, o.count);
  std::vector<Chunk> chunks(o.threads);
  std::vector<absl::Status> status(o.threads);
  uint64_t done = 0;
  while (done < o.count) {
    // Up to `threads` chunks in parallel, then written in order.
    std::vector<std::thread> workers;
    size_t used = 0;
    for (uint64_t at = done; used < o.threads && at < o.count; ++used) {
      const size_t n = std::min<uint64_t>(kChunk, o.count - at);
      workers.emplace_back([&, used, at, n] {
        status[used] = FillChunk(gen, o.first_index + at, n, &chunks[used]);
      });
      at += n;
    }
    for (std::thread& t : workers) t.join();
    for (size_t c = 0; c < used; ++c) {
      PS_RETURN_IF_ERROR(status[c]);
      for (const CtrExample& e : chunks[c].examples) {
        PS_RETURN_IF_ERROR(writer->Write(e));
        if (unseen != nullptr) PS_RETURN_IF_ERROR(unseen->Add(e));
      }
      teacher.Merge(chunks[c].teacher);
      done += chunks[c].examples.size();
    }
    meter.Update(done);
  }
  meter.Update(done, /*final=*/true);
  PS_RETURN_IF_ERROR(writer->Commit());
  const CtrMetrics m = teacher.Summary();
  const std::string json = absl::StrFormat(
      "{\"examples\": %d, \"seed\": %d, \"first_index\": %d, "
      "\"cardinalities\": [%s], \"teacher_auc\": %s, \"teacher_logloss\": %s, "
      "\"positive_rate\": %s, \"record_bytes\": %d, \"source\": "
      "\"synthetic\", \"generator\": %s, \"unseen\": %s}\n",
      m.examples, o.config.seed, o.first_index,
      absl::StrJoin(o.config.cardinalities, ", "), JsonNumber(m.auc),
      JsonNumber(m.logloss), JsonNumber(m.positive_rate()), kCtrRecordBytes,
      GeneratorJson(gen), unseen != nullptr ? unseen->Json() : "null");
  PS_RETURN_IF_ERROR(WriteText(o.out + ".json", json));
  std::cout << json;
  return absl::OkStatus();
}

absl::Status RunTsv(const Options& o) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrTsvReader> reader,
                      CtrTsvReader::Open(o.tsv));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<RecordWriter> writer,
                      RecordWriter::Open(o.out));
  Progress meter(o.progress, o.count);
  uint64_t rows = 0;  // good rows seen, skipped ones included
  uint64_t written = 0;
  uint64_t positives = 0;
  uint64_t bad = 0;
  CtrExample e;
  while (o.count == 0 || written < o.count) {
    absl::StatusOr<bool> more = reader->Next(&e);
    if (absl::IsInvalidArgument(more.status()) && o.skip_bad_rows) {
      std::cerr << "ctr_datagen: skipped: " << more.status().message() << "\n";
      ++bad;
      continue;
    }
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (rows++ < o.first_index) continue;
    PS_RETURN_IF_ERROR(writer->Write(e));
    positives += e.label == 1.0f;
    if (++written % kChunk == 0) meter.Update(written);
  }
  meter.Update(written, /*final=*/true);
  PS_RETURN_IF_ERROR(writer->Commit());
  // The value space of a TSV field: 32-bit hex values plus the missing id.
  std::vector<uint64_t> cards(kCtrCategoricalFields, kCtrMissingValue + 1);
  const std::string json = absl::StrFormat(
      "{\"examples\": %d, \"seed\": null, \"first_index\": %d, "
      "\"cardinalities\": [%s], \"teacher_auc\": null, "
      "\"teacher_logloss\": null, \"positive_rate\": %s, \"record_bytes\": "
      "%d, \"source\": \"tsv\", \"tsv\": %s, \"bad_rows_skipped\": %d, "
      "\"generator\": null, \"unseen\": null}\n",
      written, o.first_index, absl::StrJoin(cards, ", "),
      JsonNumber(written == 0 ? 0.0 : static_cast<double>(positives) / written),
      kCtrRecordBytes, JsonString(o.tsv), bad);
  PS_RETURN_IF_ERROR(WriteText(o.out + ".json", json));
  std::cout << json;
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ctr_datagen --out=FILE (--count=N | --tsv=FILE): writes CTR examples "
      "as 264-byte records plus FILE.json");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<ps::Options> options = ps::ParseFlags();
  if (!options.ok()) {
    std::cerr << "ctr_datagen: " << options.status().message() << "\n";
    return 2;
  }
  const absl::Status s =
      options->tsv.empty() ? ps::RunSynthetic(*options) : ps::RunTsv(*options);
  if (!s.ok()) {
    std::cerr << "ctr_datagen: " << s.message() << "\n";
    return absl::IsInvalidArgument(s) ? 2 : 1;
  }
  return 0;
}
