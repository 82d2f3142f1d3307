#include "worker/client/shard_relocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

// A lookup gets at least this long: the coordinator answers from memory and
// a file read, but may be across a network.
constexpr absl::Duration kMinLookupDeadline = absl::Milliseconds(500);

}  // namespace

void RelocateSignal::OnReplicaEpoch(uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch == 0 || epoch == epoch_) return;
  epoch_ = epoch;
  for (const auto& [id, wake] : wakes_) wake();
}

uint64_t RelocateSignal::Subscribe(std::function<void()> wake) {
  absl::MutexLock lock(&mu_);
  wakes_.emplace(next_id_, std::move(wake));
  return next_id_++;
}

void RelocateSignal::Unsubscribe(uint64_t id) {
  absl::MutexLock lock(&mu_);
  wakes_.erase(id);
}

ShardRelocator::ShardRelocator(Options options,
                               std::vector<std::string> addresses,
                               OnMoved on_moved)
    : options_(std::move(options)), on_moved_(std::move(on_moved)) {
  {
    absl::MutexLock lock(&mu_);
    suspect_.assign(addresses.size(), false);
    notes_.assign(addresses.size(), "");
    addresses_ = std::move(addresses);
  }
  if (options_.signal != nullptr) {
    signal_id_ = options_.signal->Subscribe([this] {
      absl::MutexLock lock(&mu_);
      look_now_ = true;
    });
  }
  thread_ = std::thread([this] { Loop(); });
}

ShardRelocator::~ShardRelocator() {
  if (options_.signal != nullptr) options_.signal->Unsubscribe(signal_id_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void ShardRelocator::Suspect(uint32_t shard) {
  absl::MutexLock lock(&mu_);
  if (shard < suspect_.size()) suspect_[shard] = true;
}

void ShardRelocator::Clear(uint32_t shard) {
  absl::MutexLock lock(&mu_);
  if (shard < suspect_.size()) suspect_[shard] = false;
}

std::string ShardRelocator::Note(uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  return shard < notes_.size() ? notes_[shard] : "";
}

uint64_t ShardRelocator::lookups() const {
  absl::MutexLock lock(&mu_);
  return lookups_;
}

bool ShardRelocator::AnySuspect() const {
  return std::find(suspect_.begin(), suspect_.end(), true) != suspect_.end();
}

std::vector<std::pair<uint32_t, std::string>> ShardRelocator::Apply(
    const absl::StatusOr<ShardAddressesResponse>& answer) {
  std::vector<std::pair<uint32_t, std::string>> moves;
  if (!answer.ok()) {
    const std::string note =
        absl::StrCat("coordinator unreachable: ", answer.status().message());
    for (uint32_t s = 0; s < notes_.size(); ++s) {
      if (suspect_[s]) notes_[s] = note;
    }
    return moves;
  }
  if (static_cast<size_t>(answer->addresses_size()) != addresses_.size()) {
    const std::string note =
        absl::StrCat("coordinator: ", answer->addresses_size(),
                     " shard addresses for ", addresses_.size(), " shards");
    for (std::string& n : notes_) n = note;
    return moves;
  }
  for (uint32_t s = 0; s < addresses_.size(); ++s) {
    notes_[s].clear();
    const std::string prefix = absl::StrCat("shards[", s, "].");
    for (const std::string& problem : answer->problems()) {
      if (absl::StartsWith(problem, prefix)) {
        notes_[s] = absl::StrCat("coordinator: ", problem);
      }
    }
    const std::string& address = answer->addresses(s);
    // The coordinator checked it; a bad one would only fail the calls.
    if (address == addresses_[s] ||
        !ValidateHostPort(address, "address", /*allow_port_zero=*/false).ok()) {
      continue;
    }
    addresses_[s] = address;
    moves.emplace_back(s, address);
  }
  return moves;
}

void ShardRelocator::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || look_now_ || AnySuspect();
    };
    mu_.Await(absl::Condition(&work));
    if (stopping_) return;
    // At most one lookup per interval, however many calls fail.
    const absl::Time due = last_lookup_ + options_.interval;
    if (absl::Now() < due) {
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), due);
      continue;
    }
    last_lookup_ = absl::Now();
    look_now_ = false;
    ++lookups_;
    const absl::Time deadline =
        last_lookup_ + std::max(options_.interval, kMinLookupDeadline);
    mu_.Unlock();
    absl::StatusOr<ShardAddressesResponse> answer = options_.locate(deadline);
    mu_.Lock();
    if (stopping_) return;
    std::vector<std::pair<uint32_t, std::string>> moves = Apply(answer);
    if (moves.empty()) continue;
    mu_.Unlock();
    for (const auto& [shard, address] : moves) on_moved_(shard, address);
    mu_.Lock();
  }
}

}  // namespace ps
