// `hypic-bench quality`: task accuracy on a model and a data set, per compose mode and seam width
// (issue 19; docs/quality.md). Every prompt of a JSONL data set (quality_data.h) is composed in
// each mode, its greedy continuation checked against the expected answer, and each mode and
// seam gets a row: exact-match accuracy with its 95% Wilson interval, the difference against
// full in points, first-token accuracy, mean KL(full || mode) and argmax agreement of the
// first answer token, the mean probability of the answer, the wall time per prompt and, when
// the data names its evidence, the accuracy split by whether the evidence lies in the seam.
//
//   hypic-bench quality --model DIR|builtin:NAME --data FILE.jsonl
//       [--modes full,naive,hypic,oracle] [--seam 0,2,4,8,16] [--limit N] [--workers N]
//       [--daemon HOST:PORT|unix:/path [--token T] [--namespace NS]] [--entry-dtype SPEC]
//       [--json] [--plot OUT.png] [--cache-dir DIR] [--device cpu|cuda[:N]]
//       [--weights-dtype auto|bf16|f32]
// In process by default; with --daemon the prompts are composed by that hypicd (which must run
// the same model: the fingerprints are compared) and the answers decoded here from the states
// it returns. Exit codes: 2 for bad flags, data or a model mismatch, 3 when the daemon cannot be
// reached, 1 when an evaluation fails.
#include <fmt/format.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpu/backend.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-bench/quality_composer.h"
#include "tools/hypic-bench/quality_data.h"
#include "tools/hypic-bench/quality_eval.h"
#include "tools/hypic-bench/quality_report.h"
#include "tools/hypic-op/model_target.h"
#include "tools/hypicctl/connection_options.h"
#include "tools/hypicctl/progress_bar.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::bench_quality {
namespace {

constexpr const char* kTool = "hypic-bench quality";

struct QualityOptions {
  ModelTarget target;
  std::string data;
  std::vector<std::string> modes = {"full", "naive", "hypic", "oracle"};
  std::vector<uint32_t> seams = {0, 2, 4, 8, 16};
  size_t limit = 0;
  int workers = 0;  // 0: one per hardware thread
  std::string daemon;
  std::string token;
  std::string name_space = "hypic-bench-quality";
  std::string entry_dtype = "f32";
  bool json = false;
  std::string plot;
};

std::string CpuName() {
  gpu::Backend* cpu = gpu::FindBackend(gpu::BackendKind::kCpu);
  auto info = cpu ? cpu->QueryDevice(0) : Result<gpu::DeviceInfo>(NotFound("no cpu backend"));
  return info.ok() ? info->name : "unknown";
}

int Fail(const Status& st, FailurePhase phase) {
  fmt::print(stderr, "{}: {}\n", kTool, st.ToString());
  return ExitCodeFor(st, phase);
}

int Run(const QualityOptions& opt) {
  auto runs = QualityRuns(opt.modes, opt.seams);
  if (!runs.ok()) return Fail(runs.status().WithContext("--modes"), FailurePhase::kOperation);
  auto dtypes = EntryDTypes::Parse(opt.entry_dtype);
  if (!dtypes.ok()) {
    return Fail(dtypes.status().WithContext("--entry-dtype"), FailurePhase::kOperation);
  }
  auto opened = opt.target.Open();
  if (!opened.ok()) return Fail(opened.status(), FailurePhase::kOperation);
  const model::Model& m = *opened->model;
  auto prompts = ReadQualityData(opt.data, static_cast<uint32_t>(m.config().vocab_size), opt.limit);
  if (!prompts.ok()) return Fail(prompts.status(), FailurePhase::kOperation);

  const int workers = opt.workers > 0 ? opt.workers : cpu::UsableCores();
  std::vector<std::unique_ptr<PromptComposer>> composers;
  for (int w = 0; w < workers && composers.size() < prompts->size(); ++w) {
    if (opt.daemon.empty()) {
      composers.push_back(InProcessComposer(m, opened->device, *dtypes));
      continue;
    }
    client::ClientOptions co;
    co.address = opt.daemon;
    co.token = opt.token;
    co.client_name = "hypic-bench-quality";
    co.io_timeout_ms = 600000;  // a cold prompt of a large model computes for a while
    auto c = DaemonComposer(m, co, opt.name_space);
    if (!c.ok())
      return Fail(c.status().WithContext("--daemon " + opt.daemon), FailurePhase::kConnect);
    composers.push_back(std::move(c).value());
  }

  ProgressBar bar("quality", "prompts", prompts->size(), stderr, ::isatty(STDERR_FILENO) != 0);
  EvaluateOptions eval{
      .runs = *runs, .device = opened->device, .on_progress = [&bar](size_t) { bar.Advance(); }};
  auto result = EvaluateQuality(m, *prompts, std::move(composers), eval);
  bar.Finish();
  if (!result.ok()) return Fail(result.status(), FailurePhase::kOperation);

  const QualitySetup setup{.model = opt.target.model,
                           .data = opt.data,
                           .source = opt.daemon.empty() ? "in process" : "daemon " + opt.daemon,
                           .cpu = CpuName(),
                           .gemm = cpu::GemmSummary(),
                           .entry_dtypes = opt.daemon.empty() ? dtypes->ToString() : std::string()};
  if (opt.json) {
    fmt::print("{}\n", QualityJson(setup, *result).dump(2));
  } else {
    fmt::print("{}", RenderQualityTable(setup, *result));
  }
  if (!opt.plot.empty()) {
    Status st = WriteQualityPlot(setup, *result, opt.plot);
    if (st.code() == StatusCode::kUnsupported) {  // no gnuplot: the data and script are written
      fmt::print(stderr, "{}: plot skipped: {}\n", kTool, st.message());
    } else if (!st.ok()) {
      fmt::print(stderr, "{}: --plot {}: {}\n", kTool, opt.plot, st.ToString());
      return kExitFailure;
    }
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "quality", "Task accuracy per compose mode and seam width on a JSONL data set",
    [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<QualityOptions>();
      opt->target.AddOptions(sub);
      sub.add_option("--data", opt->data, "JSONL data set, one prompt per line (docs/quality.md)")
          ->required();
      sub.add_option("--modes", opt->modes, "Comma-separated modes (full always runs)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--seam", opt->seams, "Comma-separated seam widths w for naive and hypic")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--limit", opt->limit, "Only the first N prompts (0: all)")
          ->capture_default_str();
      sub.add_option("--workers", opt->workers,
                     "Prompts evaluated in parallel (0: one per hardware thread)")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
      sub.add_option("--daemon", opt->daemon,
                     "Compose through this hypicd (host:port or unix:/path) instead of in process");
      sub.add_option("--token", opt->token, "--daemon's data-plane token")->envname("HYPIC_TOKEN");
      sub.add_option("--namespace", opt->name_space, "--daemon: the segments' namespace")
          ->capture_default_str();
      sub.add_option("--entry-dtype", opt->entry_dtype,
                     "In process: entry dtypes per tensor kind, e.g. f32, bf16 or "
                     "t=f32,s=f32,conv=f32,kv=bf16 (with --daemon the daemon's setting applies)")
          ->capture_default_str();
      sub.add_flag("--json", opt->json, "Print one JSON object");
      sub.add_option("--plot", opt->plot, "Write accuracy vs seam width per mode to this PNG");
      return [opt] { return Run(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::bench_quality
