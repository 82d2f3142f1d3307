// The job the elastic tests (elastic_scale_test, worker_leave_test) train:
// a small BSP MLP on 4096 synthetic examples, batches of 16, SHRINK on a
// lost or leaving worker, 2 workers at submit, and the number that follows
// a key in a process's log.
//
//   const std::string spec = ElasticMlpJob("elastic", /*epochs=*/100,
//                                          /*max_workers=*/4);
//   std::string job = Submit(spec);
//   int64_t step = NumberAfter(log, "left the coordinator before step ");
#ifndef TESTS_TESTING_ELASTIC_JOB_H_
#define TESTS_TESTING_ELASTIC_JOB_H_

#include <cstdint>
#include <string>

namespace ps {

// The JobSpec text: `name`, `epochs` epochs, num_workers 2 and, when
// `max_workers` > 0, that many rank slots (JobSpec.max_workers: an elastic
// data job, 4096 / (active workers x 16) steps per epoch); else 4096 / 2 /
// 16 = 128 steps per epoch.
std::string ElasticMlpJob(const std::string& name, uint32_t epochs,
                          uint32_t max_workers);

// The decimal number right after the first `key` in `text`; -1 when the key
// is absent or no number follows it.
int64_t NumberAfter(const std::string& text, const std::string& key);

}  // namespace ps

#endif  // TESTS_TESTING_ELASTIC_JOB_H_
