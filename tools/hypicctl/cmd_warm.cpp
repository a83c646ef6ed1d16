// `hypicctl warm FILE.jsonl`: prefills a corpus of segments (one JSON array of token ids per
// line) with PREFILL in batches, showing a progress bar with rate and ETA. Entries already
// cached are counted, not recomputed (the daemon answers them as hits).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"
#include "tools/hypicctl/progress_bar.h"
#include "tools/hypicctl/table.h"
#include "tools/hypicctl/token_lines.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_warm {
namespace {

struct WarmOptions {
  CommonOptions common;
  std::string file;
  std::string name_space;
  uint32_t seam = protocol::kDefaultSeam;
  size_t batch = 4;
};

int RunWarm(const WarmOptions& opts) {
  auto lines = ReadTokenLines(opts.file);
  if (!lines.ok()) return OperationFailed(opts.common, "warm", lines.status());
  auto conn = Connect(opts.common, /*need_admin=*/false);
  if (!conn.client) return conn.exit_code;

  ProgressBar bar("warm", "segments", lines->size(), stderr,
                  !opts.common.json && ::isatty(STDERR_FILENO) != 0);
  uint64_t computed = 0, cached = 0, tokens = 0, bytes = 0;
  for (size_t i = 0; i < lines->size(); i += opts.batch) {
    protocol::PrefillRequest req;
    req.name_space = opts.name_space;
    req.seam_w = opts.seam;
    const size_t end = std::min(lines->size(), i + opts.batch);
    req.segments.assign(lines->begin() + static_cast<std::ptrdiff_t>(i),
                        lines->begin() + static_cast<std::ptrdiff_t>(end));
    auto reply = conn.client->Prefill(req);
    if (!reply.ok()) {
      bar.Finish();
      return OperationFailed(opts.common, fmt::format("warm: segments {}-{}", i + 1, end),
                             reply.status());
    }
    for (const auto& r : reply->results) {
      (r.was_cached ? cached : computed) += 1;
      tokens += r.n_tokens;
      bytes += r.bytes;
    }
    bar.Advance(end - i);
  }
  bar.Finish();
  const double secs = bar.ElapsedSeconds();
  if (opts.common.json) {
    PrintJson({{"segments", lines->size()},
               {"computed", computed},
               {"already_cached", cached},
               {"tokens", tokens},
               {"bytes", bytes},
               {"seconds", secs},
               {"tokens_per_s", secs > 0 ? static_cast<double>(tokens) / secs : 0.0}});
  } else {
    fmt::print(
        "warmed {} segments ({} computed, {} already cached), {} tokens, {} in {} "
        "({:.0f} tokens/s)\n",
        lines->size(), computed, cached, tokens, HumanBytes(bytes), HumanDuration(secs),
        secs > 0 ? static_cast<double>(tokens) / secs : 0.0);
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "warm", "Prefill segments from a JSONL file of token-id arrays (progress, rate, ETA)",
    [](CLI::App& sub) -> Action {
      auto opts = std::make_shared<WarmOptions>();
      AddCommonOptions(sub, opts->common);
      sub.add_option("file", opts->file,
                     "FILE.jsonl, one JSON array of token ids per line (- = stdin)")
          ->required();
      sub.add_option("--namespace", opts->name_space, "namespace of the entries");
      sub.add_option("--seam", opts->seam, "seam window w (default: the daemon's)");
      sub.add_option("--batch", opts->batch, "segments per PREFILL request")
          ->check(CLI::Range(1, 256))
          ->capture_default_str();
      return [opts] { return RunWarm(*opts); };
    });

}  // namespace
}  // namespace hypic::tools::cmd_warm
