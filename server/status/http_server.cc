#include "server/status/http_server.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

void Send(mg_connection* conn, const HttpResponse& r, bool with_body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\n"
            "Content-Type: %s\r\n"
            "Content-Length: %zu\r\n"
            "Cache-Control: no-store\r\n"
            "X-Content-Type-Options: nosniff\r\n"
            "Connection: close\r\n\r\n",
            r.status, Reason(r.status), r.content_type.c_str(), r.body.size());
  if (with_body) mg_write(conn, r.body.data(), r.body.size());
}

}  // namespace

std::string QueryValue(const std::string& query, const std::string& name) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first == name) return std::string(kv.second);
  }
  return "";
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options options,
                                                              Routes routes) {
  static std::once_flag library_once;
  std::call_once(library_once, [] { mg_init_library(0); });
  const size_t colon = options.address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "status_address: \"", options.address, "\" is not host:port"));
  }
  auto server = std::unique_ptr<HttpServer>(new HttpServer(std::move(routes)));
  const std::string threads = absl::StrCat(options.threads);
  const std::string timeout = absl::StrCat(options.request_timeout_ms);
  const std::string max_request = absl::StrCat(options.max_request_bytes);
  const char* config[] = {"listening_ports",
                          options.address.c_str(),
                          "num_threads",
                          threads.c_str(),
                          "request_timeout_ms",
                          timeout.c_str(),
                          "max_request_size",
                          max_request.c_str(),
                          "enable_keep_alive",
                          "no",
                          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  // Quiet: civetweb's own log lines would go to stderr.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  mg_init_data init;
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = config;
  char error_text[256] = {0};
  unsigned error_code = 0;
  mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "status_address: cannot listen on ", options.address,
        " (in use, or not an address of this machine): ", error_text));
  }
  mg_set_request_handler(server->ctx_, "/", &HttpServer::Dispatch,
                         server.get());
  mg_server_port ports[1];
  if (mg_get_server_ports(server->ctx_, 1, ports) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "status_address: cannot read the port bound for ", options.address));
  }
  server->address_ =
      absl::StrCat(options.address.substr(0, colon), ":", ports[0].port);
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

int HttpServer::Dispatch(mg_connection* conn, void* self) {
  const auto* server = static_cast<const HttpServer*>(self);
  const mg_request_info* info = mg_get_request_info(conn);
  const bool head = std::strcmp(info->request_method, "HEAD") == 0;
  if (!head && std::strcmp(info->request_method, "GET") != 0) {
    Send(conn, HttpResponse{405, "text/plain; charset=utf-8", "GET only\n"},
         true);
    return 405;
  }
  HttpRequest request;
  request.path = info->local_uri != nullptr ? info->local_uri : "";
  request.query = info->query_string != nullptr ? info->query_string : "";
  auto it = server->routes_.find(request.path);
  const HttpResponse response =
      it == server->routes_.end()
          ? HttpResponse{404, "text/plain; charset=utf-8", "not found\n"}
          : it->second(request);
  Send(conn, response, !head);
  return response.status;
}

}  // namespace ps
