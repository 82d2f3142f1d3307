// The CPU backend's kernel choices under CpuKernels::kAuto, decided once per
// machine and shape and kept in a file, so that every later run computes with
// the same kernels (and so the same bits) instead of timing again: a timed
// choice can differ between runs on a loaded machine, and oneDNN and OpenBLAS
// differ in the last bits.
//
//   absl::StatusOr<std::unique_ptr<KernelChoices>> c =
//       KernelChoices::Open("/root/.cache/ps/cpu_kernel_choices.tsv");
//   std::optional<std::string> k = (*c)->Find(key);  // "onednn", "openblas"
//   if (!k) k = (*c)->Record(key, TimedChoice(), &warning);
//
// The file is text, one "KEY<TAB>CHOICE" line per shape, '#' comments; keys
// name the machine (CPU model, OpenBLAS kernel set, oneDNN version), the
// thread count and the shape (CpuBackend builds them). Delete the file, or a
// line, to time again. Several processes may share it: Record re-reads it
// under an flock, keeps a choice another process recorded first, and
// replaces the file atomically. Thread-safe.

#ifndef WORKER_BACKEND_CPU_KERNEL_CHOICES_H_
#define WORKER_BACKEND_CPU_KERNEL_CHOICES_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps {

class KernelChoices {
 public:
  // Choices kept in memory only (path "").
  KernelChoices() = default;

  // The choices in `path`; a missing file is an empty table, written on the
  // first Record (with its folder). Lines that do not parse are skipped and
  // counted (skipped_lines()). An error only for a file that exists and
  // cannot be read, naming the path.
  static absl::StatusOr<std::unique_ptr<KernelChoices>> Open(
      const std::string& path);

  // "onednn" or "openblas" for key, if recorded.
  std::optional<std::string> Find(const std::string& key) const;

  // Records key -> choice ("onednn" or "openblas") and returns the choice to
  // use: `choice`, or the one another process recorded first. When the file
  // cannot be written the choice is kept in memory and *warning says why
  // (else it is cleared).
  std::string Record(const std::string& key, const std::string& choice,
                     std::string* warning);

  const std::string& path() const { return path_; }
  int skipped_lines() const { return skipped_lines_; }

 private:
  // Parses file text into `into`; returns the lines skipped.
  static int Parse(const std::string& text,
                   std::map<std::string, std::string>* into);
  // Merges the file's choices under its lock, adds key and rewrites it;
  // returns the choice to use.
  absl::StatusOr<std::string> RecordInFile(const std::string& key,
                                           const std::string& choice);

  std::string path_;
  int skipped_lines_ = 0;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> choices_ ABSL_GUARDED_BY(mu_);
};

// The file a workerd keeps its choices in by default:
// $XDG_CACHE_HOME/ps/cpu_kernel_choices.tsv, else
// $HOME/.cache/ps/cpu_kernel_choices.tsv; "" when neither is set.
std::string DefaultKernelChoicesPath();

}  // namespace ps

#endif  // WORKER_BACKEND_CPU_KERNEL_CHOICES_H_
