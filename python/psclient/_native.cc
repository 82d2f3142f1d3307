// psclient._native: the pybind11 module under the psclient package (see
// python/psclient/client.py for the Python API and docs/PYTHON.md). A thin
// binding: the coordinator calls go through common/coordinator_client, a
// worker is a worker/joined_worker, and errors become the exception classes
// of psclient.errors.
//
//   c = _native.connect("configs/local/cluster.pbtxt", "", "", "", "",
//   "", 10.0) job_id, joined = c.submit(spec_text, False, False) w =
//   c.join(job_id, "", 60.0) h = w.start("pushpull", 0, None, 0);
//   h.wait(None)  # or w.wait(h, None); h.cancel() ends it early
//
// The GIL is held only while Python objects are touched: every call that
// may block (the network, a Wait) runs with it released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "common/not_retryable.h"
#include "common/text_proto.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "proto/coordinator.pb.h"
#include "tools/psctl/psctl_common.h"
#include "tools/psctl/psctl_export.h"
#include "worker/joined_worker.h"

namespace py = pybind11;

namespace ps {
namespace {

// A blocking Wait wakes this often to let Python handle signals (Ctrl-C).
constexpr absl::Duration kSignalCheck = absl::Milliseconds(100);

// Raises the psclient.errors class `cls` (by default the one for the
// status code) with the status's message and code name. Needs the GIL.
[[noreturn]] void Raise(const absl::Status& s, const char* cls = nullptr) {
  if (cls == nullptr) {
    switch (s.code()) {
      case absl::StatusCode::kDeadlineExceeded:
        cls = "Timeout";
        break;
      case absl::StatusCode::kUnavailable:
        cls = "Unavailable";
        break;
      case absl::StatusCode::kAborted:
        cls = "JobAborted";
        break;
      default:
        cls = "Error";
    }
  }
  py::object type = py::module_::import("psclient.errors").attr(cls);
  py::object error =
      type(std::string(s.message()), absl::StatusCodeToString(s.code()));
  PyErr_SetObject(type.ptr(), error.ptr());
  throw py::error_already_set();
}

absl::Duration Seconds(double s, const char* field) {
  if (!(s > 0) || !std::isfinite(s)) {
    Raise(absl::InvalidArgumentError(
        absl::StrCat(field, ": ", s, " is not a positive number of seconds")));
  }
  return absl::Seconds(s);
}

// The scalar fields of `m` as a dict (enums by name).
py::dict ScalarsToDict(const google::protobuf::Message& m) {
  namespace gp = google::protobuf;
  py::dict d;
  const gp::Descriptor* desc = m.GetDescriptor();
  const gp::Reflection* refl = m.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const gp::FieldDescriptor* f = desc->field(i);
    if (f->is_repeated()) continue;
    py::str key(f->name());
    switch (f->cpp_type()) {
      case gp::FieldDescriptor::CPPTYPE_FLOAT:
        d[key] = refl->GetFloat(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_DOUBLE:
        d[key] = refl->GetDouble(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_UINT32:
        d[key] = refl->GetUInt32(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_UINT64:
        d[key] = refl->GetUInt64(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_INT32:
        d[key] = refl->GetInt32(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_INT64:
        d[key] = refl->GetInt64(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_BOOL:
        d[key] = refl->GetBool(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_STRING:
        d[key] = refl->GetString(m, f);
        break;
      case gp::FieldDescriptor::CPPTYPE_ENUM:
        d[key] = refl->GetEnum(m, f)->name();
        break;
      case gp::FieldDescriptor::CPPTYPE_MESSAGE:
        break;
    }
  }
  return d;
}

py::dict StatusToDict(const JobStatus& j) {
  py::dict d = ScalarsToDict(j);
  d["workers"] =
      std::vector<std::string>(j.workers().begin(), j.workers().end());
  d["progress"] = ScalarsToDict(j.progress());
  d["spec_bytes"] = py::bytes(j.spec().SerializeAsString());
  return d;
}

// A coordinator call's failure, naming the coordinator when it is
// unreachable.
absl::Status Explain(const absl::Status& s, const std::string& address) {
  if (IsNotRetryable(s)) {  // the coordinator's own answer: it was reached
    return absl::Status(s.code(), absl::StrCat("the coordinator at ", address,
                                               " answered: ", s.message()));
  }
  if (s.code() == absl::StatusCode::kUnavailable ||
      s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the coordinator at ", address, ": ", s.message()));
  }
  return s;
}

class Worker {
 public:
  explicit Worker(std::unique_ptr<JoinedWorker> w) : w_(std::move(w)) {}

  JoinedWorker& w() { return *w_; }

  RequestHandle Start(ParamOp op, uint64_t step,
                      std::optional<std::vector<std::string>> tensors,
                      int priority) {
    std::vector<std::string> names =
        tensors.value_or(std::vector<std::string>());
    absl::StatusOr<RequestHandle> h;
    {
      py::gil_scoped_release release;
      h = w_->Start(op, step, names, priority);
    }
    if (!h.ok()) Raise(h.status());
    return *h;
  }

  void Wait(RequestHandle handle, std::optional<double> timeout_s) {
    absl::Time deadline = timeout_s
                              ? absl::Now() + Seconds(*timeout_s, "timeout_s")
                              : absl::InfiniteFuture();
    while (true) {
      absl::Status s;
      absl::Time slice = std::min(deadline, absl::Now() + kSignalCheck);
      {
        py::gil_scoped_release release;
        s = w_->Wait(handle, slice);
      }
      if (s.ok()) return;
      if (s.code() != absl::StatusCode::kDeadlineExceeded ||
          absl::Now() >= deadline) {
        Raise(s);
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  void Report(uint64_t step, uint64_t total_steps, uint32_t epoch, float loss,
              float train_accuracy, float test_accuracy, float samples_per_s,
              double data_s, double compute_s, double comm_s, bool finished,
              const std::string& error) {
    Progress p;
    p.set_step(step);
    p.set_total_steps(total_steps);
    p.set_epoch(epoch);
    p.set_loss(loss);
    p.set_train_accuracy(train_accuracy);
    p.set_test_accuracy(test_accuracy);
    p.set_samples_per_s(samples_per_s);
    p.set_data_s(data_s);
    p.set_compute_s(compute_s);
    p.set_comm_s(comm_s);
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = w_->Report(p, finished, error);
    }
    if (!s.ok()) Raise(s);
  }

  void Cancel(RequestHandle handle) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = w_->Cancel(handle);
    }
    if (!s.ok()) Raise(s);
  }

  void Close() {
    py::gil_scoped_release release;
    w_->Close();
  }

 private:
  std::unique_ptr<JoinedWorker> w_;
};

// One started request of a Worker (JoinedWorker's RequestHandle): wait()
// for it, or cancel() it. Keeps its worker alive.
class Handle {
 public:
  Handle(py::object worker, RequestHandle handle, ParamOp op, uint64_t step)
      : worker_(std::move(worker)), handle_(handle), op_(op), step_(step) {}

  Worker& worker() { return worker_.cast<Worker&>(); }
  RequestHandle handle() const { return handle_; }
  uint64_t id() const { return handle_.id(); }
  const char* op() const { return ParamOpName(op_); }
  uint64_t step() const { return step_; }

 private:
  py::object worker_;
  RequestHandle handle_;
  ParamOp op_;
  uint64_t step_;
};

// Worker.start: the handle of the request started.
Handle StartRequest(py::object self, const std::string& op, uint64_t step,
                    std::optional<std::vector<std::string>> tensors,
                    int priority) {
  absl::StatusOr<ParamOp> parsed = ParseParamOp(op, "op");
  if (!parsed.ok()) Raise(parsed.status());
  Worker& w = self.cast<Worker&>();
  RequestHandle h = w.Start(*parsed, step, std::move(tensors), priority);
  return Handle(std::move(self), h, *parsed, step);
}

// A 1-D float32 array over `span`, kept alive by `owner` (no copy).
py::array_t<float> View(absl::Span<float> span, py::object owner) {
  return py::array_t<float>({static_cast<py::ssize_t>(span.size())},
                            {static_cast<py::ssize_t>(sizeof(float))},
                            span.data(), owner);
}

class Client {
 public:
  explicit Client(Connection c)
      : c_(std::make_unique<Connection>(std::move(c))), coordinator_(*c_) {}

  template <typename Req, typename Resp, typename Fn>
  void Call(Fn fn, const Req& req, Resp* resp) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = coordinator_.Call(fn, req, resp);
    }
    if (!s.ok()) Raise(Explain(s, c_->coordinator));
  }

  py::tuple Submit(py::object spec, bool join_existing, bool dry_run) {
    SubmitJobRequest req;
    if (py::isinstance<py::bytes>(spec)) {
      if (!req.mutable_spec()->ParseFromString(spec.cast<std::string>())) {
        Raise(absl::InvalidArgumentError(
                  "spec: the bytes are not a serialized ps.JobSpec"),
              "InvalidSpec");
      }
    } else if (py::isinstance<py::str>(spec)) {
      absl::Status s =
          ParseTextProto(spec.cast<std::string>(), "spec", req.mutable_spec());
      if (!s.ok()) Raise(s, "InvalidSpec");
    } else {
      Raise(absl::InvalidArgumentError(
                "spec: expected a text-format str or serialized bytes"),
            "InvalidSpec");
    }
    req.set_join_existing(join_existing);
    req.set_dry_run(dry_run);
    SubmitJobResponse resp;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = coordinator_.Call(&Coordinator::Stub::SubmitJob, req, &resp);
    }
    if (s.code() == absl::StatusCode::kInvalidArgument ||
        s.code() == absl::StatusCode::kAlreadyExists) {
      Raise(s, "InvalidSpec");
    }
    if (!s.ok()) Raise(Explain(s, c_->coordinator));
    if (resp.problems_size() > 0) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
                "job spec rejected: ", absl::StrJoin(resp.problems(), "; "))),
            "InvalidSpec");
    }
    return py::make_tuple(resp.job_id(), resp.joined());
  }

  py::dict Status(const std::string& job_id) {
    GetJobRequest req;
    req.set_job_id(job_id);
    JobStatus job;
    Call(&Coordinator::Stub::GetJob, req, &job);
    return StatusToDict(job);
  }

  std::string Cancel(const std::string& job_id) {
    CancelJobRequest req;
    req.set_job_id(job_id);
    CancelJobResponse resp;
    Call(&Coordinator::Stub::CancelJob, req, &resp);
    return JobState_Name(resp.state());
  }

  py::list Jobs() {
    ListJobsResponse resp;
    Call(&Coordinator::Stub::ListJobs, ListJobsRequest(), &resp);
    py::list out;
    for (const JobStatus& j : resp.jobs()) out.append(StatusToDict(j));
    return out;
  }

  std::unique_ptr<Worker> Join(const std::string& job_id,
                               const std::string& name, double timeout_s) {
    JoinOptions o;
    o.job_id = job_id;
    o.name = name;
    o.timeout = Seconds(timeout_s, "timeout_s");
    o.control_deadline = c_->connect_timeout;
    absl::StatusOr<std::unique_ptr<JoinedWorker>> w;
    {
      py::gil_scoped_release release;
      w = JoinedWorker::Join(*c_, o);
    }
    if (!w.ok()) Raise(w.status());
    return std::make_unique<Worker>(*std::move(w));
  }

  const std::string& coordinator() const { return c_->coordinator; }

 private:
  std::unique_ptr<Connection> c_;  // owned; borrowed by coordinator_
  CoordinatorClient coordinator_;
};

std::unique_ptr<Client> Connect(const std::string& cluster,
                                const std::string& coordinator,
                                const std::string& tls_ca,
                                const std::string& tls_cert,
                                const std::string& tls_key,
                                const std::string& token, double timeout_s) {
  ConnectOptions o;
  o.cluster_file = cluster;
  o.coordinator = coordinator;
  o.tls.set_ca_file(tls_ca);
  o.tls.set_cert_file(tls_cert);
  o.tls.set_key_file(tls_key);
  o.tls.set_mutual(!tls_cert.empty());
  o.token = token;
  o.timeout = Seconds(timeout_s, "timeout_s");
  absl::StatusOr<Connection> c;
  {
    py::gil_scoped_release release;
    c = ConnectCoordinator(o);
  }
  if (!c.ok()) Raise(c.status());
  auto client = std::make_unique<Client>(*std::move(c));
  // One call now, so an unreachable cluster fails here, within timeout_s.
  client->Jobs();
  return client;
}

// The classes' bindings, one function each (the module body stays short).
void BindClient(py::module_& m) {
  py::class_<Client>(m, "Client")
      .def("submit", &Client::Submit, py::arg("spec"), py::arg("join_existing"),
           py::arg("dry_run"))
      .def("status", &Client::Status, py::arg("job_id"))
      .def("cancel", &Client::Cancel, py::arg("job_id"))
      .def("jobs", &Client::Jobs)
      .def("join", &Client::Join, py::arg("job_id"), py::arg("name"),
           py::arg("timeout_s"))
      .def_property_readonly("coordinator", &Client::coordinator);
}

void BindHandle(py::module_& m) {
  py::class_<Handle>(m, "Handle")
      .def_property_readonly("id", &Handle::id)
      .def_property_readonly("op", &Handle::op)
      .def_property_readonly("step", &Handle::step)
      .def(
          "wait",
          [](Handle& h, std::optional<double> timeout_s) {
            h.worker().Wait(h.handle(), timeout_s);
          },
          py::arg("timeout_s") = py::none())
      .def("cancel", [](Handle& h) { h.worker().Cancel(h.handle()); })
      .def("__repr__", [](const Handle& h) {
        return absl::StrCat("<psclient handle ", h.id(), ": ", h.op(),
                            " of step ", h.step(), ">");
      });
}

void BindWorker(py::module_& m) {
  py::class_<Worker>(m, "Worker")
      .def_property_readonly(
          "job_id", [](Worker& w) { return w.w().assignment().job_id(); })
      .def_property_readonly("worker_id",
                             [](Worker& w) { return w.w().worker_id(); })
      .def_property_readonly(
          "rank", [](Worker& w) { return w.w().assignment().rank(); })
      .def_property_readonly(
          "num_workers",
          [](Worker& w) { return w.w().assignment().num_workers(); })
      .def_property_readonly(
          "start_step",
          [](Worker& w) { return w.w().assignment().start_step(); })
      .def_property_readonly(
          "spec_bytes",
          [](Worker& w) {
            return py::bytes(w.w().assignment().spec().SerializeAsString());
          })
      .def_property_readonly(
          "tensors",
          [](Worker& w) {
            py::list out;
            for (const FlatTensor& t : w.w().tensors()) {
              py::tuple shape(t.shape.size());
              for (size_t i = 0; i < t.shape.size(); ++i) shape[i] = t.shape[i];
              out.append(py::make_tuple(t.name, shape, t.offset, t.size));
            }
            return out;
          })
      .def_property_readonly("params",
                             [](py::object self) {
                               Worker& w = self.cast<Worker&>();
                               return View(w.w().params(), self);
                             })
      .def_property_readonly("grads",
                             [](py::object self) {
                               Worker& w = self.cast<Worker&>();
                               return View(w.w().grads(), self);
                             })
      .def_property_readonly("aborted",
                             [](Worker& w) { return w.w().aborted(); })
      .def_property_readonly("leads", [](Worker& w) { return w.w().leads(); })
      .def("start", &StartRequest, py::arg("op"), py::arg("step"),
           py::arg("tensors"), py::arg("priority"))
      .def(
          "wait",
          [](Worker& w, Handle& h, std::optional<double> timeout_s) {
            w.Wait(h.handle(), timeout_s);
          },
          py::arg("handle"), py::arg("timeout_s"))
      .def(
          "cancel", [](Worker& w, Handle& h) { w.Cancel(h.handle()); },
          py::arg("handle"))
      .def("report", &Worker::Report, py::arg("step"), py::arg("total_steps"),
           py::arg("epoch"), py::arg("loss"), py::arg("train_accuracy"),
           py::arg("test_accuracy"), py::arg("samples_per_s"),
           py::arg("data_s"), py::arg("compute_s"), py::arg("comm_s"),
           py::arg("finished"), py::arg("error"))
      .def("close", &Worker::Close);
}

// psctl export with these arguments (["JOB", "-o", "FILE.npz",
// "--cluster=...", ...]): the same code, so the same file and the same
// refusals. Returns psctl's summary line; raises psclient.errors.Error
// (InvalidSpec for bad input, exit 2) with psctl's message otherwise.
std::string ExportModel(const std::vector<std::string>& argv) {
  std::vector<std::string> raw = {"export"};
  raw.insert(raw.end(), argv.begin(), argv.end());
  psctl::Args args;
  std::ostringstream out, err;
  int code = psctl::kExitUsage;
  absl::Status parsed = psctl::ParseArgs(raw, &args);
  if (parsed.ok()) {
    py::gil_scoped_release release;
    code = psctl::Export(args, out, err);
  } else {
    err << parsed.message();
  }
  if (code != psctl::kExitOk) {
    std::string why = err.str();
    while (!why.empty() && why.back() == '\n') why.pop_back();
    Raise(absl::InvalidArgumentError(why),
          code == psctl::kExitUsage ? "InvalidSpec" : "Error");
  }
  return out.str();
}

}  // namespace
}  // namespace ps

PYBIND11_MODULE(_native, m) {
  m.doc() = "psclient's native core (see psclient.client for the API)";
  m.def("connect", &ps::Connect, py::arg("cluster"), py::arg("coordinator"),
        py::arg("tls_ca"), py::arg("tls_cert"), py::arg("tls_key"),
        py::arg("token"), py::arg("timeout_s"));
  m.def("export_model", &ps::ExportModel, py::arg("argv"));
  ps::BindClient(m);
  ps::BindHandle(m);
  ps::BindWorker(m);
}
