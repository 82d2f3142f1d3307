#include "server/status/status_page.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

class FakeSource : public StatusSource {
 public:
  absl::Status ListJobs(ListJobsResponse* response) override {
    JobStatus* j = response->add_jobs();
    j->set_job_id("job-000001");
    j->set_name("mlp <b>");
    j->set_state(RUNNING);
    j->mutable_placement()->add_chunks()->set_tensor("fc0/w");
    return absl::OkStatus();
  }
  absl::Status GetHistory(const GetHistoryRequest& request,
                          GetHistoryResponse* response) override {
    if (request.job_id() != "job-000001") {
      return absl::NotFoundError("job_id: no job " + request.job_id());
    }
    response->set_job_id(request.job_id());
    response->add_points()->set_loss(0.5f);
    return absl::OkStatus();
  }
  std::vector<ShardAnswer> Shards() override {
    std::vector<ShardAnswer> answers(2);
    answers[0].address = "127.0.0.1:1";
    answers[0].stats.set_jobs(1);
    answers[1].shard = 1;
    answers[1].address = "127.0.0.1:2";
    answers[1].status = absl::UnavailableError("connection \"refused\"");
    return answers;
  }
};

HttpResponse Call(const HttpServer::Routes& routes, const std::string& path,
                  const std::string& query = "") {
  auto it = routes.find(path);
  EXPECT_NE(it, routes.end()) << path;
  HttpRequest request;
  request.method = "GET";
  request.path = path;
  request.query = query;
  return it == routes.end() ? HttpResponse{} : it->second(request);
}

TEST(StatusPageTest, PageAndScriptAreServed) {
  FakeSource source;
  HttpServer::Routes routes = StatusPageRoutes(&source);
  HttpResponse page = Call(routes, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_TRUE(absl::StartsWith(page.content_type, "text/html"));
  EXPECT_TRUE(absl::StrContains(page.body, "<script src=\"/status.js\">"));
  HttpResponse js = Call(routes, "/status.js");
  EXPECT_TRUE(absl::StrContains(js.body, "function refresh()"));
}

TEST(StatusPageTest, JobsAreJsonWithoutPlacements) {
  FakeSource source;
  HttpResponse jobs = Call(StatusPageRoutes(&source), "/api/jobs");
  EXPECT_EQ(jobs.status, 200);
  EXPECT_EQ(jobs.content_type, "application/json");
  EXPECT_TRUE(absl::StrContains(jobs.body, "\"job_id\":\"job-000001\""));
  EXPECT_TRUE(absl::StrContains(jobs.body, "\"state\":\"RUNNING\""));
  EXPECT_FALSE(absl::StrContains(jobs.body, "fc0/w")) << jobs.body;
}

TEST(StatusPageTest, HistoryChecksTheJobId) {
  FakeSource source;
  HttpServer::Routes routes = StatusPageRoutes(&source);
  HttpResponse ok = Call(routes, "/api/history", "job=job-000001");
  EXPECT_EQ(ok.status, 200);
  EXPECT_TRUE(absl::StrContains(ok.body, "\"loss\":0.5")) << ok.body;
  EXPECT_EQ(Call(routes, "/api/history", "job=job-000009").status, 404);
  HttpResponse bad = Call(routes, "/api/history", "job=%3Cscript%3E");
  EXPECT_EQ(bad.status, 400);
  EXPECT_TRUE(absl::StrContains(bad.body, "\"error\":\"job: ")) << bad.body;
  EXPECT_EQ(Call(routes, "/api/history", "").status, 400);
}

TEST(StatusPageTest, ShardsListAnswersAndErrors) {
  FakeSource source;
  HttpResponse shards = Call(StatusPageRoutes(&source), "/api/shards");
  EXPECT_EQ(shards.status, 200);
  EXPECT_TRUE(absl::StrContains(shards.body, "\"jobs\":1")) << shards.body;
  EXPECT_TRUE(absl::StrContains(
      shards.body, "\"error\":\"connection \\\"refused\\\"\",\"stats\":null"))
      << shards.body;
}

}  // namespace
}  // namespace ps
