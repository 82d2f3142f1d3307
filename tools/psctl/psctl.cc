#include "tools/psctl/psctl.h"

#include "absl/strings/str_cat.h"
#include "tools/psctl/psctl_common.h"
#include "tools/psctl/psctl_curves.h"
#include "tools/psctl/psctl_export.h"
#include "tools/psctl/psctl_jobs.h"
#include "tools/psctl/psctl_stats.h"
#include "tools/psctl/psctl_submit.h"
#include "tools/psctl/psctl_trace.h"

namespace ps {
namespace {

constexpr char kUsage[] = R"(usage: psctl COMMAND [ARGS] [FLAGS]

Commands:
  submit JOB.pbtxt   submit a job spec (text format, see configs/jobs/)
      --dry-run        validate and place only; print the placement
      --wait           follow the job until it ends; exit 1 unless SUCCEEDED
      --timeout=S      give up waiting after S seconds (default 3600)
  status JOB         one job's state and progress        [--json]
  list               every job the coordinator knows, finished ones with
                     their results too (kept across coordinator restarts
                     with PsdConfig.state_dir)            [--json] [--all]
  cancel JOB         cancel a pending or running job
  scale JOB --workers=N
                     grow or shrink a running job to N workers (up to its
                     spec's max_workers; on_worker_failure SHRINK); status
                     shows the progress (docs/OPERATIONS.md "Elastic jobs")
  scale JOB --shards=N
                     re-place a running job's dense chunks on the
                     first N shards while it trains (the chunks that move
                     are copied at a step boundary); status shows it
  scale JOB --drain=K[,K2]
                     move a running job's dense chunks off shards K,
                     K2 onto its other shards (e.g. before taking a server
                     node down); status shows the shards it is left on
  stats              per-shard statistics                 [--json] [--job=JOB]
                     and per sparse table and shard (rows, bytes vs budget,
                     admissions, evictions, rows/s, hottest ids)
      --hot=N          hottest ids per table line (default 3, 0 = none)
  curves JOB [JOB...] -o FILE
                     training curves (loss, accuracy, samples/s by step):
                     FILE.csv, or a chart of every job (.png, .svg, .pdf;
                     python3-matplotlib)
      --python=PATH    the interpreter that draws (default /usr/bin/python3)
  trace JOB --steps=A:B -o FILE.json
                     step timeline of steps [A, B) of a running job, Trace
                     Event Format (chrome://tracing, Perfetto): phases per
                     device, calls per shard, applies, flows; at most 1000
                     steps; waits for the workers to pass step B
      --timeout=S      give up after S seconds (default 600)
  export JOB -o FILE.npz
                     a running or SUCCEEDED job's dense parameters, pulled
                     from the shards: one array per tensor (name, shape), the
                     job spec as JSON under "__job_spec__" (numpy.load); its
                     sparse tables' rows streamed in as tables/NAME/ids and
                     tables/NAME/values (rows x dim)
      --tables-dir=DIR the tables instead as DIR/NAME.shardN.npz (ids, values)
      --timeout=S      each call's deadline: a pull, or one table's rows from
                       one shard (default 60)
  export [JOB] --from-checkpoint DIR -o FILE.npz
                     the same from the shards' newest intact checkpoints in
                     DIR (PsdConfig.checkpoint_dir), for stopped shards
                     (a built-in model as PyTorch .pt/.ts or ONNX:
                     python3 -m psclient.export_model, docs/TUTORIAL.md)

Flags (every command):
  --cluster=FILE          cluster file (default configs/local/cluster.pbtxt)
  --coordinator=HOST:PORT coordinator address, instead of the cluster file's
                          (with --cluster too, TLS and the token still come
                          from the cluster file)
  --connect-timeout=S     how long to wait for the cluster (default 4)
  --help                  this text

Exit codes: 0 ok, 1 job failed or cancelled, 2 usage or validation error,
3 cluster unreachable.
)";

}  // namespace

int RunPsctl(const std::vector<std::string>& raw, std::ostream& out,
             std::ostream& err, bool interactive) {
  psctl::Args a;
  absl::Status parsed = psctl::ParseArgs(raw, &a);
  if (!parsed.ok()) {
    err << "psctl: " << parsed.message() << "\n" << kUsage;
    return psctl::kExitUsage;
  }
  if (psctl::Has(a, "--help") || a.command == "help") {
    out << kUsage;
    return psctl::kExitOk;
  }
  if (a.command == "submit") return psctl::Submit(a, out, err, interactive);
  if (a.command == "status") return psctl::Status(a, out, err);
  if (a.command == "list") return psctl::List(a, out, err);
  if (a.command == "cancel") return psctl::Cancel(a, out, err);
  if (a.command == "scale") return psctl::Scale(a, out, err);
  if (a.command == "stats") return psctl::Stats(a, out, err);
  if (a.command == "curves") return psctl::Curves(a, out, err);
  if (a.command == "trace") return psctl::Trace(a, out, err);
  if (a.command == "export") return psctl::Export(a, out, err);
  err << (a.command.empty()
              ? std::string("psctl: missing command")
              : absl::StrCat("psctl: unknown command \"", a.command, "\""))
      << "\n"
      << kUsage;
  return psctl::kExitUsage;
}

}  // namespace ps
