#include "worker/trainer/progress_meter.h"

#include <chrono>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

using Clock = ProgressMeter::Clock;
using std::chrono::milliseconds;

// A clock that moves only when the test says so.
struct FakeClock {
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  std::function<Clock::time_point()> Fn() {
    return [this] { return now; };
  }
};

ProgressMeter::Options MeterOptions(FakeClock* clock) {
  ProgressMeter::Options o;
  o.total_steps = 10;
  o.steps_per_epoch = 4;
  o.batch_size = 8;
  o.num_workers = 2;
  o.report_interval = absl::InfiniteDuration();
  o.now = clock->Fn();
  return o;
}

TEST(ProgressMeterTest, StartsWithoutAccuracy) {
  FakeClock clock;
  ProgressMeter meter(MeterOptions(&clock));
  EXPECT_EQ(meter.progress().total_steps(), 10u);
  EXPECT_FLOAT_EQ(meter.progress().test_accuracy(), -1.0f);
  EXPECT_DOUBLE_EQ(meter.train_s(), 0.0);
}

TEST(ProgressMeterTest, ReportsMeansSinceTheLastReportAndCumulativeTimes) {
  FakeClock clock;
  ProgressMeter meter(MeterOptions(&clock));
  meter.AddComm(milliseconds(500));  // the first Pull
  meter.AddStep(milliseconds(100), milliseconds(200), milliseconds(300),
                /*loss_sum=*/8.0, /*correct=*/4);
  meter.AddStep(milliseconds(100), milliseconds(200), milliseconds(300),
                /*loss_sum=*/4.0, /*correct=*/8);
  clock.now += std::chrono::seconds(3);
  std::vector<Progress> reports;
  auto collect = [&](const Progress& p) { reports.push_back(p); };
  meter.Report(5, collect);
  ASSERT_EQ(reports.size(), 1u);
  const Progress& p = reports[0];
  EXPECT_EQ(p.step(), 5u);
  EXPECT_EQ(p.epoch(), 1u);               // 5 / 4
  EXPECT_FLOAT_EQ(p.loss(), 12.0f / 16);  // per example
  EXPECT_FLOAT_EQ(p.train_accuracy(), 12.0f / 16);
  EXPECT_DOUBLE_EQ(p.data_s(), 0.2);
  EXPECT_DOUBLE_EQ(p.compute_s(), 0.4);
  EXPECT_DOUBLE_EQ(p.comm_s(), 1.1);
  // 2 steps * 8 examples * 2 workers / 1.7 s in the loop.
  EXPECT_FLOAT_EQ(p.samples_per_s(), static_cast<float>(32 / 1.7));
  EXPECT_DOUBLE_EQ(p.elapsed_s(), 3.0);
  EXPECT_FLOAT_EQ(p.test_accuracy(), -1.0f);

  // No step since: loss and accuracy stay; an evaluation shows up.
  meter.SetTestAccuracy(0.5f);
  meter.Report(5, nullptr);
  EXPECT_FLOAT_EQ(meter.progress().loss(), 0.75f);
  EXPECT_FLOAT_EQ(meter.progress().test_accuracy(), 0.5f);
  // The next window starts empty.
  meter.AddStep(milliseconds(0), milliseconds(0), milliseconds(0), 1.0, 2);
  meter.Report(6, collect);
  EXPECT_FLOAT_EQ(reports.back().loss(), 1.0f / 8);
  EXPECT_FLOAT_EQ(reports.back().train_accuracy(), 2.0f / 8);
}

TEST(ProgressMeterTest, DueByStepCountNeverForTheLastStep) {
  FakeClock clock;
  ProgressMeter::Options o = MeterOptions(&clock);
  o.report_every_steps = 3;
  ProgressMeter meter(o);
  for (uint64_t done = 1; done <= 2; ++done) {
    meter.AddStep({}, {}, {}, 0.0, 0);
    EXPECT_FALSE(meter.ReportDue(done, clock.now)) << done;
  }
  meter.AddStep({}, {}, {}, 0.0, 0);
  EXPECT_TRUE(meter.ReportDue(3, clock.now));
  meter.Report(3, nullptr);
  EXPECT_FALSE(meter.ReportDue(4, clock.now));  // the window restarted
  for (int i = 0; i < 3; ++i) meter.AddStep({}, {}, {}, 0.0, 0);
  EXPECT_FALSE(meter.ReportDue(10, clock.now));  // the final report follows
}

TEST(ProgressMeterTest, DueByInterval) {
  FakeClock clock;
  ProgressMeter::Options o = MeterOptions(&clock);
  o.report_interval = absl::Seconds(1);
  ProgressMeter meter(o);
  const Clock::time_point start = clock.now;
  EXPECT_FALSE(meter.ReportDue(1, start + milliseconds(999)));
  EXPECT_TRUE(meter.ReportDue(1, start + milliseconds(1000)));
  clock.now = start + milliseconds(1500);
  meter.Report(1, nullptr);
  EXPECT_FALSE(meter.ReportDue(2, start + milliseconds(2000)));
  EXPECT_TRUE(meter.ReportDue(2, start + milliseconds(2500)));
}

TEST(ProgressMeterTest, ARunAfterAReplacementCarriesOnTheCurve) {
  FakeClock clock;
  ProgressMeter::Options o = MeterOptions(&clock);
  Progress before;
  before.set_step(4);
  before.set_elapsed_s(10.0);
  before.set_data_s(1.0);
  before.set_compute_s(2.0);
  before.set_comm_s(1.0);
  before.set_test_accuracy(0.8f);
  o.continues = before;
  o.continued_steps = 4;
  ProgressMeter meter(o);
  meter.AddStep(milliseconds(0), milliseconds(1000), milliseconds(0), 1.0, 1);
  clock.now += std::chrono::seconds(2);
  Progress p;
  meter.Report(5, [&](const Progress& r) { p = r; });
  EXPECT_DOUBLE_EQ(p.elapsed_s(), 12.0);  // not 2: the curve goes on
  EXPECT_DOUBLE_EQ(p.compute_s(), 3.0);
  EXPECT_FLOAT_EQ(p.test_accuracy(), 0.8f);
  // 5 steps x 8 examples x 2 workers over 5 s in the step loop.
  EXPECT_FLOAT_EQ(p.samples_per_s(), 16.0f);
}

}  // namespace
}  // namespace ps
