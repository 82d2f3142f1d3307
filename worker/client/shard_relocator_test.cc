// ShardRelocator with a scripted coordinator (a function): it looks only
// while a shard is suspect, reports each move once, keeps notes naming the
// coordinator's problems, and is rate-limited. Synchronized on
// notifications and the lookups themselves; no sleeps.
#include "worker/client/shard_relocator.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// The coordinator's answers, changed by the test; counts lookups and lets
// the test wait for the n-th.
class ScriptedCoordinator {
 public:
  void Answer(absl::StatusOr<ShardAddressesResponse> answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  absl::StatusOr<ShardAddressesResponse> Locate(absl::Time) {
    absl::MutexLock lock(&mu_);
    ++calls_;
    return answer_;
  }
  // Waits until `n` lookups were answered; false after 10 s.
  bool AwaitCalls(int n) {
    absl::MutexLock lock(&mu_);
    auto done = [&]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  absl::StatusOr<ShardAddressesResponse> answer_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

ShardAddressesResponse Addresses(std::vector<std::string> addresses,
                                 std::vector<std::string> problems = {}) {
  ShardAddressesResponse r;
  for (std::string& a : addresses) r.add_addresses(std::move(a));
  for (std::string& p : problems) r.add_problems(std::move(p));
  return r;
}

class ShardRelocatorTest : public ::testing::Test {
 protected:
  void Make(absl::Duration interval = absl::Milliseconds(10),
            std::shared_ptr<RelocateSignal> signal = nullptr) {
    ShardRelocator::Options options;
    options.locate = [this](absl::Time d) { return coordinator_.Locate(d); };
    options.interval = interval;
    options.signal = std::move(signal);
    relocator_ = std::make_unique<ShardRelocator>(
        options, std::vector<std::string>{"h:1", "h:2"},
        [this](uint32_t shard, const std::string& address) {
          absl::MutexLock lock(&mu_);
          moves_.emplace_back(shard, address);
        });
  }
  // Waits until `n` moves were reported; false after 10 s.
  bool AwaitMoves(size_t n) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return moves_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
  }
  std::vector<std::pair<uint32_t, std::string>> moves() {
    absl::MutexLock lock(&mu_);
    return moves_;
  }

  ScriptedCoordinator coordinator_;
  absl::Mutex mu_;
  std::vector<std::pair<uint32_t, std::string>> moves_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ShardRelocator> relocator_;
};

TEST_F(ShardRelocatorTest, LooksOnlyWhileSuspectAndReportsAMoveOnce) {
  coordinator_.Answer(Addresses({"h:1", "h:2"}));
  Make();
  // Nothing suspect: the relocator asks nobody.
  EXPECT_EQ(coordinator_.calls(), 0);
  relocator_->Suspect(1);
  ASSERT_TRUE(coordinator_.AwaitCalls(2));  // still at h:2: keeps looking
  coordinator_.Answer(Addresses({"h:1", "h:9"}));
  const int before = coordinator_.calls();
  ASSERT_TRUE(coordinator_.AwaitCalls(before + 2));
  relocator_->Clear(1);
  relocator_.reset();  // joins: no lookup or move after this
  EXPECT_THAT(moves(), ElementsAre(Pair(1u, "h:9")));
}

TEST_F(ShardRelocatorTest, NotesNameTheCoordinatorsProblemOrFailure) {
  coordinator_.Answer(Addresses(
      {"h:1", "h:2"},
      {"shards[1].address_file /x/s1.addr: \"junk\" is not host:port"}));
  Make();
  relocator_->Suspect(1);
  ASSERT_TRUE(coordinator_.AwaitCalls(2));
  EXPECT_EQ(relocator_->Note(0), "");
  EXPECT_THAT(relocator_->Note(1),
              HasSubstr("coordinator: shards[1].address_file /x/s1.addr"));
  coordinator_.Answer(absl::UnavailableError("connection refused"));
  ASSERT_TRUE(coordinator_.AwaitCalls(coordinator_.calls() + 2));
  EXPECT_THAT(relocator_->Note(1),
              HasSubstr("coordinator unreachable: connection refused"));
  // An answer of the wrong size or a garbage address moves nothing.
  coordinator_.Answer(Addresses({"h:1"}));
  ASSERT_TRUE(coordinator_.AwaitCalls(coordinator_.calls() + 2));
  EXPECT_THAT(relocator_->Note(1), HasSubstr("1 shard addresses for 2"));
  coordinator_.Answer(Addresses({"h:1", "not an address"}));
  ASSERT_TRUE(coordinator_.AwaitCalls(coordinator_.calls() + 2));
  relocator_.reset();
  EXPECT_TRUE(moves().empty());
}

// A new replica epoch (a heartbeat's) makes one lookup with nothing
// suspect: a primary cut off from the network fails no call, yet its
// successor must be found. The same epoch again makes none.
TEST_F(ShardRelocatorTest, ANewReplicaEpochMakesOneLookup) {
  coordinator_.Answer(Addresses({"h:1", "h:9"}));
  auto signal = std::make_shared<RelocateSignal>();
  Make(absl::Milliseconds(10), signal);
  EXPECT_EQ(coordinator_.calls(), 0);
  signal->OnReplicaEpoch(0);  // no replicated job: nothing
  signal->OnReplicaEpoch(2);
  ASSERT_TRUE(AwaitMoves(1));
  signal->OnReplicaEpoch(2);
  relocator_.reset();  // joins: no lookup or move after this
  EXPECT_EQ(coordinator_.calls(), 1);
  EXPECT_THAT(moves(), ElementsAre(Pair(1u, "h:9")));
  // A relocator gone is no longer woken.
  signal->OnReplicaEpoch(3);
  EXPECT_EQ(coordinator_.calls(), 1);
}

TEST_F(ShardRelocatorTest, OneLookupPerInterval) {
  coordinator_.Answer(Addresses({"h:1", "h:2"}));
  Make(absl::Seconds(30));
  for (int i = 0; i < 100; ++i) relocator_->Suspect(i % 2);
  ASSERT_TRUE(coordinator_.AwaitCalls(1));
  // The next is 30 s away: the destructor does not wait for it.
  const absl::Time start = absl::Now();
  relocator_.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(coordinator_.calls(), 1);
}

}  // namespace
}  // namespace ps
