#include "worker/client/testing/fake_shard_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/client/shard_wire.h"

namespace ps {
namespace {

grpc::Status Malformed() {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: parse");
}

}  // namespace

FakeShardServer::FakeShardServer(std::vector<uint64_t> chunk_lengths) {
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < chunk_lengths.size(); ++i) {
      values_.emplace_back(chunk_lengths[i], static_cast<float>(i + 1));
    }
    versions_.assign(chunk_lengths.size(), 0);
  }
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeShardServer::~FakeShardServer() { Kill(); }

void FakeShardServer::Kill() {
  std::deque<Parked> parked;
  {
    absl::MutexLock lock(&mu_);
    if (killed_) return;
    killed_ = true;
    parked.swap(parked_);
  }
  for (Parked& p : parked) {
    p.answer = [](std::string*) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shard going down");
    };
    Finish(std::move(p));
  }
  server_->Shutdown(absl::ToChronoTime(absl::Now()));
}

void FakeShardServer::set_hold(bool hold) {
  absl::MutexLock lock(&mu_);
  hold_ = hold;
}

bool FakeShardServer::ReleaseOne() {
  Parked p;
  {
    absl::MutexLock lock(&mu_);
    if (parked_.empty()) return false;
    p = std::move(parked_.front());
    parked_.pop_front();
  }
  Finish(std::move(p));
  return true;
}

void FakeShardServer::FailNext(int n, grpc::Status status) {
  absl::MutexLock lock(&mu_);
  fail_next_ = n;
  fail_status_ = std::move(status);
}

bool FakeShardServer::AwaitArrivals(size_t n, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return arrivals_.size() >= n;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline);
}

std::vector<FakeShardServer::Arrival> FakeShardServer::arrivals() {
  absl::MutexLock lock(&mu_);
  return arrivals_;
}

void FakeShardServer::Finish(Parked p) {
  std::string reply;
  grpc::Status status = p.answer(&reply);
  if (status.ok()) {
    grpc::Slice slice(reply);
    *p.resp = grpc::ByteBuffer(&slice, 1);
  }
  p.reactor->Finish(status);
}

grpc::ServerUnaryReactor* FakeShardServer::Handle(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp, Arrival arrival,
    Answer answer) {
  Parked p{ctx->DefaultReactor(), resp, std::move(answer)};
  {
    absl::MutexLock lock(&mu_);
    arrivals_.push_back(std::move(arrival));
    if (fail_next_ > 0) {
      --fail_next_;
      grpc::Status status = fail_status_;
      p.answer = [status](std::string*) { return status; };
    } else if (hold_ && !killed_) {
      parked_.push_back(std::move(p));
      return parked_.back().reactor;
    }
  }
  grpc::ServerUnaryReactor* reactor = p.reactor;
  Finish(std::move(p));
  return reactor;
}

grpc::Status FakeShardServer::Apply(const PushPullRequest& req,
                                    PushPullResponse* reply) {
  absl::MutexLock lock(&mu_);
  for (const ChunkData& g : req.gradients()) {
    if (g.chunk_id() >= values_.size() ||
        g.data().size() != values_[g.chunk_id()].size() * sizeof(float)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "gradient");
    }
    std::vector<float>& v = values_[g.chunk_id()];
    const float* d = reinterpret_cast<const float*>(g.data().data());
    for (size_t k = 0; k < v.size(); ++k) v[k] -= d[k];
    versions_[g.chunk_id()]++;
    if (reply == nullptr) continue;
    ChunkData* c = reply->add_parameters();
    c->set_chunk_id(g.chunk_id());
    c->set_version(versions_[g.chunk_id()]);
    c->set_data(std::string(reinterpret_cast<const char*>(v.data()),
                            v.size() * sizeof(float)));
  }
  return grpc::Status::OK;
}

grpc::Status FakeShardServer::Read(const std::vector<uint32_t>& ids,
                                   PullResponse* reply) {
  absl::MutexLock lock(&mu_);
  for (uint32_t id : ids) {
    if (id >= values_.size()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "chunk id");
    }
    ChunkData* c = reply->add_parameters();
    c->set_chunk_id(id);
    c->set_version(versions_[id]);
    c->set_data(std::string(reinterpret_cast<const char*>(values_[id].data()),
                            values_[id].size() * sizeof(float)));
  }
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* FakeShardServer::PushPull(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  auto r = std::make_shared<PushPullRequest>();
  const bool parsed = r->ParseFromString(Flatten(*req));
  Arrival a{"PushPull", r->step(), r->attempt(), {}, r->placement_epoch()};
  for (const ChunkData& g : r->gradients()) a.chunk_ids.push_back(g.chunk_id());
  return Handle(ctx, resp, std::move(a), [this, r, parsed](std::string* out) {
    if (!parsed) return Malformed();
    PushPullResponse reply;
    grpc::Status s = Apply(*r, &reply);
    *out = reply.SerializeAsString();
    return s;
  });
}

grpc::ServerUnaryReactor* FakeShardServer::Push(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  PushRequest push;
  const bool parsed = push.ParseFromString(Flatten(*req));
  Arrival a{"Push", push.step(), push.attempt(), {}, push.placement_epoch()};
  // Applied as a PushPull's gradients (fields 1-5 are the same).
  auto r = std::make_shared<PushPullRequest>();
  r->mutable_gradients()->Swap(push.mutable_gradients());
  for (const ChunkData& g : r->gradients()) a.chunk_ids.push_back(g.chunk_id());
  return Handle(ctx, resp, std::move(a), [this, r, parsed](std::string* out) {
    if (!parsed) return Malformed();
    grpc::Status s = Apply(*r, nullptr);
    *out = PushResponse().SerializeAsString();
    return s;
  });
}

grpc::ServerUnaryReactor* FakeShardServer::Pull(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  auto r = std::make_shared<PullRequest>();
  const bool parsed = r->ParseFromString(Flatten(*req));
  Arrival a{"Pull", r->step(), 0, {}, r->placement_epoch()};
  a.chunk_ids.assign(r->chunk_ids().begin(), r->chunk_ids().end());
  return Handle(ctx, resp, std::move(a), [this, r, parsed](std::string* out) {
    if (!parsed) return Malformed();
    PullResponse reply;
    grpc::Status s =
        Read({r->chunk_ids().begin(), r->chunk_ids().end()}, &reply);
    *out = reply.SerializeAsString();
    return s;
  });
}

}  // namespace ps
