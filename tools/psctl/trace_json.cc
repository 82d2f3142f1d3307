#include "tools/psctl/trace_json.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_string.h"

namespace ps {
namespace {

constexpr int kWorkerPidBase = 1000;
constexpr int kShardPidBase = 1;
constexpr int kStepTid = 1;
constexpr int kReduceTid = 2;
constexpr int kDeviceTidBase = 10;
constexpr int kLaneTidBase = 100;
constexpr int kLanesPerTrack = 64;
constexpr int kApplyTrack = 0;  // shard tracks: apply, then one per worker

const char* SpanName(TraceSpanKind k) {
  switch (k) {
    case TRACE_STEP:
      return "step";
    case TRACE_DATA_WAIT:
      return "data wait";
    case TRACE_COMPUTE:
      return "compute";
    case TRACE_COMM_WAIT:
      return "comm wait";
    case TRACE_FORWARD:
      return "forward";
    case TRACE_BACKWARD:
      return "backward";
    case TRACE_LOCAL_REDUCE:
      return "local reduce";
    case TRACE_RPC:
      return "PushPull";
    case TRACE_PULL_REPLY:
      return "pull reply";
    case TRACE_SHARD_REQUEST:
      return "request";
    case TRACE_SHARD_APPLY:
      return "apply";
    default:
      return "span";
  }
}

// Greedy lanes: the first lane whose last span ended by `start`.
class Lanes {
 public:
  int Place(int64_t start, int64_t end) {
    for (size_t i = 0; i < ends_.size(); ++i) {
      if (ends_[i] <= start) {
        ends_[i] = end;
        return static_cast<int>(i);
      }
    }
    if (ends_.size() + 1 >= kLanesPerTrack) {  // the last lane takes the rest
      ends_.back() = std::max(ends_.back(), end);
      return static_cast<int>(ends_.size()) - 1;
    }
    ends_.push_back(end);
    return static_cast<int>(ends_.size()) - 1;
  }

 private:
  std::vector<int64_t> ends_;
};

struct Placed {
  const TraceSpan* span;
  int pid;
  int tid;
};

class Writer {
 public:
  Writer(std::ostream& out, int64_t t0) : out_(out), t0_(t0) {}

  void Meta(const char* what, int pid, int tid, const std::string& name) {
    Begin();
    out_ << "{\"ph\":\"M\",\"name\":\"" << what << "\",\"pid\":" << pid
         << ",\"tid\":" << tid << ",\"args\":{\"name\":" << JsonString(name)
         << "}}";
  }
  void Complete(const Placed& p, const std::string& cat) {
    const TraceSpan& s = *p.span;
    Begin();
    out_ << "{\"ph\":\"X\",\"name\":\"" << SpanName(s.kind()) << "\",\"cat\":\""
         << cat << "\",\"ts\":" << Us(s.start_ns()) << ",\"dur\":" << Dur(s)
         << ",\"pid\":" << p.pid << ",\"tid\":" << p.tid
         << ",\"args\":{\"step\":" << s.step();
    if (s.kind() == TRACE_RPC || s.kind() == TRACE_PULL_REPLY) {
      out_ << ",\"shard\":" << s.shard();
      if (s.kind() == TRACE_RPC) out_ << ",\"attempt\":" << s.attempt();
    }
    if (s.kind() == TRACE_SHARD_REQUEST) out_ << ",\"worker\":" << s.worker();
    if (s.kind() == TRACE_LOCAL_REDUCE && s.layer() >= 0) {
      out_ << ",\"layer\":" << s.layer();
    }
    out_ << "}}";
    ++events_;
  }
  // ph "s", "t" or "f" at `ts_ns` on (pid, tid).
  void Flow(char ph, uint64_t id, int64_t ts_ns, int pid, int tid) {
    Begin();
    out_ << "{\"ph\":\"" << ph << "\",\"name\":\"push-apply-reply\","
         << "\"cat\":\"step\",\"id\":" << id << ",\"ts\":" << Us(ts_ns)
         << ",\"pid\":" << pid << ",\"tid\":" << tid;
    if (ph != 's') out_ << ",\"bp\":\"e\"";
    out_ << "}";
    ++events_;
  }
  uint64_t events() const { return events_; }

 private:
  void Begin() {
    if (!first_) out_ << ",\n";
    first_ = false;
  }
  std::string Us(int64_t ns) const {
    return absl::StrFormat("%.3f", static_cast<double>(ns - t0_) / 1e3);
  }
  static std::string Dur(const TraceSpan& s) {
    return absl::StrFormat("%.3f", static_cast<double>(std::max<int64_t>(
                                       0, s.end_ns() - s.start_ns())) /
                                       1e3);
  }

  std::ostream& out_;
  const int64_t t0_;
  bool first_ = true;
  uint64_t events_ = 0;
};

int64_t Earliest(const TraceInput& in) {
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const WorkerTrace& w : in.workers) {
    for (const TraceSpan& s : w.spans()) t0 = std::min(t0, s.start_ns());
  }
  for (const ShardTrace& sh : in.shards) {
    for (const TraceSpan& s : sh.spans()) t0 = std::min(t0, s.start_ns());
  }
  return t0 == std::numeric_limits<int64_t>::max() ? 0 : t0;
}

// Sorted by start (stable): lanes are placed in time order.
std::vector<const TraceSpan*> ByStart(
    const google::protobuf::RepeatedPtrField<TraceSpan>& spans) {
  std::vector<const TraceSpan*> v;
  v.reserve(spans.size());
  for (const TraceSpan& s : spans) v.push_back(&s);
  std::stable_sort(v.begin(), v.end(),
                   [](const TraceSpan* a, const TraceSpan* b) {
                     return a->start_ns() < b->start_ns();
                   });
  return v;
}

// (worker, shard, step) -> the flow's worker end points.
using FlowKey = std::tuple<uint32_t, uint32_t, uint64_t>;
struct FlowEnds {
  const Placed* first_call = nullptr;
  const Placed* last_reply = nullptr;
};

// A worker thread's name from its tid (see the tid constants above).
std::string WorkerThreadName(const WorkerTrace& w, int tid) {
  if (tid == kStepTid) return "step";
  if (tid == kReduceTid) return "local reduce";
  if (tid < kLaneTidBase) {
    const int d = tid - kDeviceTidBase;
    return absl::StrCat("device ", d,
                        d < w.devices_size() ? " " + w.devices(d) : "");
  }
  const int shard = (tid - kLaneTidBase) / kLanesPerTrack;
  const int lane = (tid - kLaneTidBase) % kLanesPerTrack;
  return absl::StrCat("shard ", shard, " calls",
                      lane > 0 ? absl::StrCat(" (", lane + 1, ")") : "");
}

// A shard thread's name from its tid: an apply lane or a worker's requests.
std::string ShardThreadName(int tid) {
  const int track = (tid - kLaneTidBase) / kLanesPerTrack;
  const int lane = (tid - kLaneTidBase) % kLanesPerTrack;
  const std::string suffix = lane > 0 ? absl::StrCat(" (", lane + 1, ")") : "";
  return track == kApplyTrack
             ? "apply" + suffix
             : absl::StrCat("worker ", track - 1, " requests", suffix);
}

// Where every span goes (pid, tid), the threads to name and the flows'
// end points, gathered worker by worker and shard by shard; then written
// in that order.
class Layout {
 public:
  explicit Layout(const TraceInput& in) : in_(in) {
    size_t total = 0;
    for (const WorkerTrace& w : in.workers) total += w.spans_size();
    for (const ShardTrace& s : in.shards) total += s.spans_size();
    placed_.reserve(total);  // stable: flows_ and applies_ point into it
  }

  // Places a worker's spans, counts its dropped spans and the window steps
  // it has no step span for.
  void AddWorker(const WorkerTrace& w, TraceSummary* sum) {
    const int pid = kWorkerPidBase + static_cast<int>(w.rank());
    sum->dropped += w.dropped();
    std::set<uint64_t> steps;
    const std::set<int> used_tids = PlaceWorkerSpans(w, pid, &steps);
    PlaceReplies(w, pid);
    for (uint64_t t = in_.window.begin_step(); t < in_.window.end_step(); ++t) {
      if (steps.count(t) == 0) sum->missing_steps.insert(t);
    }
    threads_.emplace_back(
        pid, -1, absl::StrCat("workerd ", w.name(), " (rank ", w.rank(), ")"));
    for (int tid : used_tids) {
      threads_.emplace_back(pid, tid, WorkerThreadName(w, tid));
    }
  }

  // Places a shard's spans in lanes per track and notes its applies.
  void AddShard(const ShardTrace& sh, TraceSummary* sum) {
    const int pid = kShardPidBase + static_cast<int>(sh.shard_id());
    sum->dropped += sh.dropped();
    std::map<int, Lanes> lanes;  // by track: apply, then 1 + worker
    std::set<int> used_tids;
    for (const TraceSpan* s : ByStart(sh.spans())) {
      const bool apply = s->kind() == TRACE_SHARD_APPLY;
      const int track = apply ? kApplyTrack : 1 + static_cast<int>(s->worker());
      const int tid = kLaneTidBase + track * kLanesPerTrack +
                      lanes[track].Place(s->start_ns(), s->end_ns());
      placed_.push_back({s, pid, tid});
      used_tids.insert(tid);
      if (apply) {
        // -1: every worker's (BSP); signed on both sides of the ?:.
        const int64_t who =
            s->all_workers() ? int64_t{-1} : static_cast<int64_t>(s->worker());
        applies_[{sh.shard_id(), s->step(), who}] = &placed_.back();
      }
    }
    threads_.emplace_back(pid, -1, absl::StrCat("psd shard ", sh.shard_id()));
    for (int tid : used_tids)
      threads_.emplace_back(pid, tid, ShardThreadName(tid));
  }

  // The "M" events naming processes and threads, then the spans' "X" events.
  void WriteSpans(Writer& wr) const {
    for (const auto& [pid, tid, name] : threads_) {
      if (tid < 0) {
        wr.Meta("process_name", pid, 0, name);
      } else {
        wr.Meta("thread_name", pid, tid, name);
      }
    }
    for (const Placed& p : placed_) {
      wr.Complete(p, p.pid >= kWorkerPidBase ? "worker" : "shard");
    }
  }

  // One flow per (worker, shard, step) with both ends: first call, the
  // shard's apply if found, last reply. Returns how many.
  uint64_t WriteFlows(Writer& wr) const {
    uint64_t id = 0;
    for (const auto& [key, ends] : flows_) {
      const auto& [rank, shard, step] = key;
      if (ends.first_call == nullptr || ends.last_reply == nullptr) continue;
      const Placed* apply = FindApply(shard, step, rank);
      ++id;
      wr.Flow('s', id, ends.first_call->span->start_ns(), ends.first_call->pid,
              ends.first_call->tid);
      if (apply != nullptr) {
        wr.Flow('t', id, apply->span->start_ns(), apply->pid, apply->tid);
      }
      wr.Flow('f', id, ends.last_reply->span->start_ns(), ends.last_reply->pid,
              ends.last_reply->tid);
    }
    return id;
  }

 private:
  // The tid of a worker span, or -1 for a pull reply (placed later, in its
  // call's lane). Notes step spans in `steps`.
  static int WorkerTid(const TraceSpan& s, std::map<uint32_t, Lanes>* lanes,
                       std::set<uint64_t>* steps) {
    switch (s.kind()) {
      case TRACE_FORWARD:
      case TRACE_BACKWARD:
        return kDeviceTidBase + static_cast<int>(s.device());
      case TRACE_LOCAL_REDUCE:
        return kReduceTid;
      case TRACE_RPC:
        return kLaneTidBase + static_cast<int>(s.shard()) * kLanesPerTrack +
               (*lanes)[s.shard()].Place(s.start_ns(), s.end_ns());
      case TRACE_PULL_REPLY:
        return -1;
      default:
        if (s.kind() == TRACE_STEP) steps->insert(s.step());
        return kStepTid;
    }
  }

  // Places every worker span but the pull replies; returns the tids used.
  std::set<int> PlaceWorkerSpans(const WorkerTrace& w, int pid,
                                 std::set<uint64_t>* steps) {
    std::map<uint32_t, Lanes> lanes;  // by shard
    std::set<int> used_tids;
    for (const TraceSpan* s : ByStart(w.spans())) {
      const int tid = WorkerTid(*s, &lanes, steps);
      if (tid < 0) continue;
      placed_.push_back({s, pid, tid});
      used_tids.insert(tid);
      if (s->kind() == TRACE_RPC) {
        FlowEnds& f = flows_[{w.rank(), s->shard(), s->step()}];
        if (f.first_call == nullptr) f.first_call = &placed_.back();
      }
    }
    return used_tids;
  }

  // Replies: nested in the RPC span they end (same shard, step, end).
  void PlaceReplies(const WorkerTrace& w, int pid) {
    std::map<std::tuple<uint32_t, uint64_t, int64_t>, int> rpc_lane;
    for (const Placed& p : placed_) {
      if (p.pid == pid && p.span->kind() == TRACE_RPC) {
        rpc_lane[{p.span->shard(), p.span->step(), p.span->end_ns()}] = p.tid;
      }
    }
    for (const TraceSpan& s : w.spans()) {
      if (s.kind() != TRACE_PULL_REPLY) continue;
      auto it = rpc_lane.find({s.shard(), s.step(), s.end_ns()});
      if (it == rpc_lane.end()) continue;
      placed_.push_back({&s, pid, it->second});
      FlowEnds& f = flows_[{w.rank(), s.shard(), s.step()}];
      if (f.last_reply == nullptr ||
          f.last_reply->span->start_ns() < s.start_ns()) {
        f.last_reply = &placed_.back();
      }
    }
  }

  // The shard's apply of `step` for every worker (BSP), else for `rank`.
  const Placed* FindApply(uint32_t shard, uint64_t step, uint32_t rank) const {
    auto it = applies_.find({shard, step, -1});
    if (it == applies_.end()) it = applies_.find({shard, step, rank});
    return it == applies_.end() ? nullptr : it->second;
  }

  const TraceInput& in_;
  std::vector<Placed> placed_;
  std::vector<std::tuple<int, int, std::string>> threads_;  // tid -1: process
  std::map<FlowKey, FlowEnds> flows_;
  // Shard applies: (shard, step, worker or -1) -> placed.
  std::map<std::tuple<uint32_t, uint64_t, int64_t>, const Placed*> applies_;
};

void WriteHeader(const TraceInput& in, std::ostream& out) {
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"job\":"
      << JsonString(in.window.job_id())
      << ",\"name\":" << JsonString(in.job_name)
      << ",\"begin_step\":" << in.window.begin_step()
      << ",\"end_step\":" << in.window.end_step()
      << ",\"clock\":\"unix time, microseconds from the earliest span\"},\n"
      << "\"traceEvents\":[\n";
}

}  // namespace

TraceSummary WriteTraceJson(const TraceInput& in, std::ostream& out) {
  TraceSummary sum;
  Layout layout(in);
  for (const WorkerTrace& w : in.workers) layout.AddWorker(w, &sum);
  if (in.workers.empty()) {
    for (uint64_t t = in.window.begin_step(); t < in.window.end_step(); ++t) {
      sum.missing_steps.insert(t);
    }
  }
  for (const ShardTrace& sh : in.shards) layout.AddShard(sh, &sum);

  WriteHeader(in, out);
  Writer wr(out, Earliest(in));
  layout.WriteSpans(wr);
  sum.flows = layout.WriteFlows(wr);
  out << "\n]}\n";
  sum.events = wr.events();
  return sum;
}

}  // namespace ps
