#include "server/status/status_page.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "server/status/status_page_html.h"
#include "server/status/status_page_js.h"

namespace ps {
namespace {

constexpr char kJson[] = "application/json";
// Job ids are "job-000001"; anything longer or odder is refused unread.
constexpr size_t kMaxJobIdLength = 64;

std::string ToJson(const google::protobuf::Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, options);
  return json;
}

// A JSON string literal.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

HttpResponse Error(const absl::Status& s) {
  const int code = s.code() == absl::StatusCode::kNotFound          ? 404
                   : s.code() == absl::StatusCode::kInvalidArgument ? 400
                                                                    : 503;
  return HttpResponse{
      code, kJson,
      absl::StrCat("{\"error\":", Quote(std::string(s.message())), "}")};
}

bool PlainJobId(const std::string& id) {
  if (id.empty() || id.size() > kMaxJobIdLength) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_') return false;
  }
  return true;
}

HttpResponse Jobs(StatusSource* source) {
  ListJobsResponse jobs;
  if (absl::Status s = source->ListJobs(&jobs); !s.ok()) return Error(s);
  // The page shows no placements; a large model's would dwarf the rest.
  for (JobStatus& j : *jobs.mutable_jobs()) {
    j.clear_placement();
    j.mutable_spec()->mutable_model()->Clear();
  }
  return HttpResponse{200, kJson, ToJson(jobs)};
}

HttpResponse History(StatusSource* source, const HttpRequest& r) {
  GetHistoryRequest request;
  request.set_job_id(QueryValue(r.query, "job"));
  if (!PlainJobId(request.job_id())) {
    return Error(absl::InvalidArgumentError(
        "job: want ?job=JOB_ID (letters, digits, '-', '_')"));
  }
  GetHistoryResponse history;
  if (absl::Status s = source->GetHistory(request, &history); !s.ok()) {
    return Error(s);
  }
  return HttpResponse{200, kJson, ToJson(history)};
}

HttpResponse Shards(StatusSource* source) {
  std::vector<std::string> items;
  for (const StatusSource::ShardAnswer& a : source->Shards()) {
    items.push_back(absl::StrCat(
        "{\"shard\":", a.shard, ",\"address\":", Quote(a.address),
        ",\"error\":", Quote(std::string(a.status.message())),
        ",\"stats\":", a.status.ok() ? ToJson(a.stats) : "null", "}"));
  }
  return HttpResponse{
      200, kJson,
      absl::StrCat("{\"shards\":[", absl::StrJoin(items, ","), "]}")};
}

}  // namespace

HttpServer::Routes StatusPageRoutes(StatusSource* source) {
  HttpServer::Routes routes;
  routes["/"] = [](const HttpRequest&) {
    return HttpResponse{200, "text/html; charset=utf-8", kStatusPageHtml};
  };
  routes["/status.js"] = [](const HttpRequest&) {
    return HttpResponse{200, "text/javascript; charset=utf-8", kStatusPageJs};
  };
  routes["/api/jobs"] = [source](const HttpRequest&) { return Jobs(source); };
  routes["/api/history"] = [source](const HttpRequest& r) {
    return History(source, r);
  };
  routes["/api/shards"] = [source](const HttpRequest&) {
    return Shards(source);
  };
  return routes;
}

}  // namespace ps
