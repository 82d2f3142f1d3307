// StatusPage: the coordinator's status page, an HTML page and a little
// JavaScript (embedded in the binary, no framework) over three JSON
// endpoints, served by HttpServer on PsdConfig.status_address:
//
//   /                  the page: the job list (state, progress, loss,
//                      accuracy, samples/s, step split), each job's curves
//                      as inline SVG, the shards with their stats; the JS
//                      refreshes it every few seconds
//   /status.js         the page's script
//   /api/jobs          every job (ListJobsResponse as JSON, without the
//                      placements)
//   /api/history?job=J the job's curve (GetHistoryResponse as JSON)
//   /api/shards        each shard's Stats, or why it did not answer
//
//   MyStatusSource source(...);   // outlives the server
//   PS_ASSIGN_OR_RETURN(auto http, HttpServer::Start(options,
//                                                   StatusPageRoutes(&source)));
//
// A page load reads copies the coordinator makes under its lock and asks the
// shards for Stats; it never holds a lock the training path waits on while
// it renders.
#ifndef SERVER_STATUS_STATUS_PAGE_H_
#define SERVER_STATUS_STATUS_PAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/http_server.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"

namespace ps {

// What the page shows. Thread-safe implementations: the server calls them
// concurrently.
class StatusSource {
 public:
  struct ShardAnswer {
    uint32_t shard = 0;
    std::string address;
    absl::Status status;  // why `stats` is empty
    ShardStats stats;
  };

  virtual ~StatusSource() = default;
  virtual absl::Status ListJobs(ListJobsResponse* response) = 0;
  virtual absl::Status GetHistory(const GetHistoryRequest& request,
                                  GetHistoryResponse* response) = 0;
  // Every shard's Stats, by shard id (each bounded by a deadline).
  virtual std::vector<ShardAnswer> Shards() = 0;
};

// The routes above. `source` is borrowed and must outlive the server.
HttpServer::Routes StatusPageRoutes(StatusSource* source);

}  // namespace ps

#endif  // SERVER_STATUS_STATUS_PAGE_H_
