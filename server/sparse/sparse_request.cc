#include "server/sparse/sparse_request.h"

#include <cstring>

namespace ps {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ids and values travel as little-endian bytes, copied as is");

SparseRowsIn RowsFromProto(const SparseRows& r) {
  SparseRowsIn in;
  in.table = r.table();
  in.ids_bytes = r.ids().size();
  in.values_bytes = r.values().size();
  in.ids.resize(in.ids_bytes / sizeof(uint64_t));
  in.values.resize(in.values_bytes / sizeof(float));
  if (!in.ids.empty()) {
    std::memcpy(in.ids.data(), r.ids().data(),
                in.ids.size() * sizeof(uint64_t));
  }
  if (!in.values.empty()) {
    std::memcpy(in.values.data(), r.values().data(),
                in.values.size() * sizeof(float));
  }
  return in;
}

}  // namespace

SparseRequestIn SparseRequestFromProto(const SparseExchangeRequest& req) {
  SparseRequestIn in;
  in.job_id = req.job_id();
  in.worker = req.worker();
  in.step = req.step();
  in.attempt = req.attempt();
  in.push = req.push();
  in.part = req.part();
  in.parts = req.parts();
  if (req.has_table_shard()) in.table_shard = req.table_shard();
  in.placement_epoch = req.placement_epoch();
  for (const SparseRows& r : req.gradients()) {
    in.gradients.push_back(RowsFromProto(r));
  }
  for (const SparseRows& r : req.pull()) in.pull.push_back(RowsFromProto(r));
  return in;
}

void SparseReplyToProto(const SparseRequestIn& in, const SparseReplyOut& out,
                        SparseExchangeResponse* resp) {
  resp->Clear();
  resp->set_version(out.version);
  resp->set_duplicate(out.duplicate);
  resp->set_stale(out.stale);
  for (size_t i = 0; i < out.rows.size() && i < in.pull.size(); ++i) {
    SparseRows* r = resp->add_rows();
    r->set_table(in.pull[i].table);
    r->set_ids(reinterpret_cast<const char*>(in.pull[i].ids.data()),
               in.pull[i].ids.size() * sizeof(uint64_t));
    r->set_values(reinterpret_cast<const char*>(out.rows[i].data()),
                  out.rows[i].size() * sizeof(float));
  }
}

}  // namespace ps
