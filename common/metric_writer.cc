#include "common/metric_writer.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace ps {

HistogramSample HistogramFromProto(const Histogram& h, bool integers) {
  HistogramSample out;
  for (int i = 0; i < h.counts_size(); ++i) {
    out.count += h.counts(i);
    if (i < h.bounds_size()) {
      const double le = integers ? h.bounds(i) - 1 : h.bounds(i);
      out.buckets.push_back({out.count, le});
    }
  }
  out.sum = h.sum();
  return out;
}

prometheus::ClientMetric& MetricWriter::Add(const std::string& name,
                                            const std::string& help,
                                            prometheus::MetricType type,
                                            MetricLabels labels) {
  auto [it, inserted] = index_.try_emplace(name, families_.size());
  if (inserted) {
    prometheus::MetricFamily family;
    family.name = name;
    family.help = help;
    family.type = type;
    families_.push_back(std::move(family));
  }
  prometheus::MetricFamily& family = families_[it->second];
  if (family.type != type) {  // a programmer's error, never input
    std::fprintf(stderr, "MetricWriter: %s written with two types\n",
                 name.c_str());
    std::abort();
  }
  family.metric.emplace_back();
  family.metric.back().label = std::move(labels);
  return family.metric.back();
}

void MetricWriter::Counter(const std::string& name, const std::string& help,
                           MetricLabels labels, double value) {
  Add(name, help, prometheus::MetricType::Counter, std::move(labels))
      .counter.value = value;
}

void MetricWriter::Gauge(const std::string& name, const std::string& help,
                         MetricLabels labels, double value) {
  Add(name, help, prometheus::MetricType::Gauge, std::move(labels))
      .gauge.value = value;
}

void MetricWriter::Histogram(const std::string& name, const std::string& help,
                             MetricLabels labels, HistogramSample sample) {
  prometheus::ClientMetric::Histogram& h =
      Add(name, help, prometheus::MetricType::Histogram, std::move(labels))
          .histogram;
  h.sample_count = sample.count;
  h.sample_sum = sample.sum;
  h.bucket = std::move(sample.buckets);
}

std::vector<prometheus::MetricFamily> MetricWriter::Take() {
  index_.clear();
  return std::exchange(families_, {});
}

}  // namespace ps
