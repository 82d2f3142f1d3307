#include "worker/worker_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Scrape(const WorkerMetrics& m) {
  return prometheus::TextSerializer().Serialize(m.Collect());
}

TEST(WorkerMetricsTest, EmptyBeforeTheFirstJob) {
  WorkerMetrics m;
  EXPECT_EQ(Scrape(m), "");
}

TEST(WorkerMetricsTest, StepSplitLossAccuracyAndThroughput) {
  WorkerMetrics m;
  Progress p;
  p.set_step(40);
  p.set_total_steps(100);
  p.set_data_s(0.5);
  p.set_compute_s(2.25);
  p.set_comm_s(1.125);
  p.set_samples_per_s(1500);
  p.set_loss(0.75);
  p.set_train_accuracy(0.5);
  p.set_test_accuracy(-1);
  m.Update("j", 1, p);
  const std::string text = Scrape(m);
  const std::string labels = "job=\"j\",worker=\"1\"";
  EXPECT_THAT(text, HasSubstr("# TYPE ps_worker_step_seconds_total counter"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_seconds_total{" + labels +
                              ",phase=\"data\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_seconds_total{" + labels +
                              ",phase=\"compute\"} 2.25\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step_seconds_total{" + labels +
                              ",phase=\"communication\"} 1.125\n"));
  EXPECT_THAT(text,
              HasSubstr("ps_worker_samples_per_second{" + labels + "} 1500\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_loss{" + labels + "} 0.75\n"));
  EXPECT_THAT(text,
              HasSubstr("ps_worker_train_accuracy{" + labels + "} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("ps_worker_step{" + labels + "} 40\n"));
  // Not evaluated yet: no test accuracy series.
  EXPECT_THAT(text, Not(HasSubstr("ps_worker_test_accuracy")));

  p.set_test_accuracy(0.875);
  m.Update("k", 0, p);  // the next job replaces the last one's series
  const std::string next = Scrape(m);
  EXPECT_THAT(next, HasSubstr("ps_worker_test_accuracy{job=\"k\",worker=\"0\"}"
                              " 0.875\n"));
  EXPECT_THAT(next, Not(HasSubstr("job=\"j\"")));
}

TEST(WorkerMetricsTest, TableTrafficAndRowCache) {
  WorkerMetrics m;
  Progress p;
  m.Update("j", 0, p);
  EXPECT_THAT(Scrape(m), Not(HasSubstr("row_cache")));
  SparseProgress* s = p.mutable_sparse();
  s->set_rows_pushed(1000);
  s->set_rows_pulled(300);
  s->set_row_cache_hits(700);
  s->set_row_cache_misses(300);
  s->set_row_cache_evictions(5);
  s->set_row_cache_bytes_saved(33600);
  s->set_row_cache_bytes_used(4096);
  m.Update("j", 0, p);
  const std::string text = Scrape(m);
  const std::string labels = "{job=\"j\",worker=\"0\"} ";
  EXPECT_THAT(text,
              HasSubstr("ps_worker_table_rows_pushed_total" + labels + "1000"));
  EXPECT_THAT(text,
              HasSubstr("ps_worker_table_rows_pulled_total" + labels + "300"));
  EXPECT_THAT(text,
              HasSubstr("ps_worker_row_cache_hits_total" + labels + "700"));
  EXPECT_THAT(text,
              HasSubstr("ps_worker_row_cache_misses_total" + labels + "300"));
  EXPECT_THAT(text,
              HasSubstr("ps_worker_row_cache_evictions_total" + labels + "5"));
  EXPECT_THAT(text, HasSubstr("ps_worker_row_cache_saved_bytes_total" + labels +
                              "33600"));
  EXPECT_THAT(text, HasSubstr("ps_worker_row_cache_bytes" + labels + "4096"));
  EXPECT_THAT(text,
              HasSubstr("ps_worker_row_cache_hit_ratio" + labels + "0.7"));
}

}  // namespace
}  // namespace ps
