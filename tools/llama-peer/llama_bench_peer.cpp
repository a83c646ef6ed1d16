// llama_bench_peer: llama.cpp's CPU prefill of one GGUF model, the side-by-side peer for hypic's
// prefill benchmarks (issue 14). Built by tools/llama-peer/run.sh with g++ against the prebuilt
// llama.cpp libraries of npm's @node-llama-cpp/linux-x64 (llama.cpp release v0.4.0), using the
// llama.h / ggml headers of that same release.
//
//   llama_bench_peer --model M.gguf --lib-dir DIR [--threads 2] [--prompts 512,2048] [--reps 5]
//                    [--seed 1] [--tokens 1,2,3 | --tokens-file F] [--logits-out F.npy]
//                    [--kv-type f16|f32] [--flash-attn auto|on|off] [--verbose]
//
// Timing mode (no --logits-out): for each prompt length P, a fresh context with n_ctx = P,
// n_batch = n_ubatch = P, n_threads = n_threads_batch = --threads and a persistent ggml threadpool
// attached (as llama-bench does); the whole prompt is one llama_decode (only the last token's
// logits are produced, as in llama-bench's prompt test); one warm-up decode, then --reps timed
// decodes (memory cleared before each), wall time around llama_decode + llama_synchronize.
// Prompt tokens are --tokens / --tokens-file (repeated to length P) or uniform random ids.
// One JSON object per prompt length goes to stdout, one per line.
//
// Logits mode (--logits-out): one decode of the given tokens as one batch with logits at every
// position, written as a float32 .npy of shape [T, n_vocab].
#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

struct Options {
  std::string model;
  std::string lib_dir;
  int threads = 2;
  std::vector<int> prompts = {512};
  int reps = 5;
  unsigned seed = 1;
  std::vector<llama_token> tokens;
  std::string logits_out;
  std::string kv_type = "f16";
  std::string flash_attn = "auto";
  bool verbose = false;
};

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "llama_bench_peer: %s\n", msg.c_str());
  std::exit(2);
}

std::vector<long> ParseList(const std::string& text, const char* what) {
  std::vector<long> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0) Die(std::string(what) + ": bad entry '" + item + "'");
    out.push_back(v);
  }
  if (out.empty()) Die(std::string(what) + ": empty list");
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model")
      o.model = next();
    else if (a == "--lib-dir")
      o.lib_dir = next();
    else if (a == "--threads")
      o.threads = std::atoi(next().c_str());
    else if (a == "--prompts") {
      o.prompts.clear();
      for (long v : ParseList(next(), "--prompts")) o.prompts.push_back(static_cast<int>(v));
    } else if (a == "--reps")
      o.reps = std::atoi(next().c_str());
    else if (a == "--seed")
      o.seed = static_cast<unsigned>(std::atol(next().c_str()));
    else if (a == "--tokens") {
      for (long v : ParseList(next(), "--tokens")) o.tokens.push_back(static_cast<llama_token>(v));
    } else if (a == "--tokens-file") {
      std::ifstream f(next());
      if (!f) Die("--tokens-file: cannot open");
      std::stringstream ss;
      ss << f.rdbuf();
      std::string s = ss.str();
      std::replace(s.begin(), s.end(), '\n', ',');
      std::replace(s.begin(), s.end(), ' ', ',');
      for (long v : ParseList(s, "--tokens-file")) o.tokens.push_back(static_cast<llama_token>(v));
    } else if (a == "--logits-out")
      o.logits_out = next();
    else if (a == "--kv-type")
      o.kv_type = next();
    else if (a == "--flash-attn")
      o.flash_attn = next();
    else if (a == "--verbose")
      o.verbose = true;
    else if (a == "--help" || a == "-h") {
      std::printf("see the comment at the top of llama_bench_peer.cpp\n");
      std::exit(0);
    } else
      Die("unknown flag " + a);
  }
  if (o.model.empty()) Die("--model is required");
  if (o.threads < 1) Die("--threads must be >= 1");
  if (o.reps < 1) Die("--reps must be >= 1");
  if (o.kv_type != "f16" && o.kv_type != "f32") Die("--kv-type: f16 or f32");
  return o;
}

double CpuSeconds() {  // user + system time of this process (all threads)
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

bool g_verbose = false;
void LogCb(ggml_log_level level, const char* text, void*) {
  if (g_verbose || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

std::string JsonEscape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += c;
    } else if (static_cast<unsigned char>(c) < 0x20)
      r += ' ';
    else
      r += c;
  }
  return r;
}

void WriteNpy(const std::string& path, const std::vector<float>& data, size_t rows, size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) Die("cannot write " + path);
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t hlen = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&hlen), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()),
          static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!f) Die("short write to " + path);
}

struct Peer {
  llama_model* model = nullptr;
  ggml_threadpool* tp = nullptr;
  decltype(ggml_threadpool_new)* tp_new = nullptr;
  decltype(ggml_threadpool_free)* tp_free = nullptr;
  std::string cpu_lib;       // the ggml CPU variant library that was loaded
  std::string cpu_features;  // its feature list, "AVX512=1,..."
};

llama_context* MakeContext(const Options& o, Peer& p, int n_ctx, int n_batch) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(n_ctx);
  cp.n_batch = static_cast<uint32_t>(n_batch);
  cp.n_ubatch = static_cast<uint32_t>(n_batch);
  cp.n_seq_max = 1;
  cp.n_threads = o.threads;
  cp.n_threads_batch = o.threads;
  cp.type_k = cp.type_v = (o.kv_type == "f32") ? GGML_TYPE_F32 : GGML_TYPE_F16;
  cp.flash_attn_type = o.flash_attn == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : o.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                               : LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(p.model, cp);
  if (!ctx) Die("llama_init_from_model failed (n_ctx " + std::to_string(n_ctx) + ")");
  llama_attach_threadpool(ctx, p.tp, nullptr);
  return ctx;
}

// Decodes `toks` as one batch at positions 0..T-1; `all_logits` asks for every position's logits.
void Decode(llama_context* ctx, llama_batch& batch, const std::vector<llama_token>& toks,
            bool all_logits) {
  batch.n_tokens = static_cast<int32_t>(toks.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    batch.token[i] = toks[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = (all_logits || i + 1 == toks.size()) ? 1 : 0;
  }
  int rc = llama_decode(ctx, batch);
  if (rc != 0) Die("llama_decode returned " + std::to_string(rc));
  llama_synchronize(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  g_verbose = o.verbose;
  llama_log_set(LogCb, nullptr);
  ggml_log_set(LogCb, nullptr);

  if (!o.lib_dir.empty())
    ggml_backend_load_all_from_path(o.lib_dir.c_str());
  else
    ggml_backend_load_all();
  ggml_backend_dev_t cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!cpu_dev) Die("no ggml CPU backend could be loaded (--lib-dir " + o.lib_dir + ")");
  ggml_backend_reg_t cpu_reg = ggml_backend_dev_backend_reg(cpu_dev);

  Peer p;
  p.tp_new = reinterpret_cast<decltype(ggml_threadpool_new)*>(
      ggml_backend_reg_get_proc_address(cpu_reg, "ggml_threadpool_new"));
  p.tp_free = reinterpret_cast<decltype(ggml_threadpool_free)*>(
      ggml_backend_reg_get_proc_address(cpu_reg, "ggml_threadpool_free"));
  if (!p.tp_new || !p.tp_free) Die("CPU backend exports no ggml_threadpool_new/free");
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(p.tp_new), &info) && info.dli_fname)
    p.cpu_lib = info.dli_fname;
  if (auto get_features = reinterpret_cast<ggml_backend_get_features_t>(
          ggml_backend_reg_get_proc_address(cpu_reg, "ggml_backend_get_features"))) {
    for (ggml_backend_feature* f = get_features(cpu_reg); f && f->name; ++f) {
      if (!p.cpu_features.empty()) p.cpu_features += ",";
      p.cpu_features += std::string(f->name) + "=" + f->value;
    }
  }

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  p.model = llama_model_load_from_file(o.model.c_str(), mp);
  if (!p.model) Die("cannot load model " + o.model);
  const llama_vocab* vocab = llama_model_get_vocab(p.model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  char desc[256] = {0};
  llama_model_desc(p.model, desc, sizeof desc);

  ggml_threadpool_params tpp = ggml_threadpool_params_default(o.threads);
  p.tp = p.tp_new(&tpp);
  if (!p.tp) Die("ggml_threadpool_new failed");

  std::string variant = p.cpu_lib;
  if (auto s = variant.rfind('/'); s != std::string::npos) variant = variant.substr(s + 1);
  if (variant.rfind("libggml-cpu-", 0) == 0) variant = variant.substr(12);
  if (auto d = variant.find(".so"); d != std::string::npos) variant = variant.substr(0, d);
  std::fprintf(stderr,
               "llama_bench_peer: model %s (%s), n_vocab %d, ggml CPU variant %s, threads %d\n",
               o.model.c_str(), desc, n_vocab, variant.c_str(), o.threads);

  if (!o.logits_out.empty()) {
    if (o.tokens.empty()) Die("--logits-out needs --tokens or --tokens-file");
    for (llama_token t : o.tokens)
      if (t < 0 || t >= n_vocab) Die("token id " + std::to_string(t) + " out of range");
    const int T = static_cast<int>(o.tokens.size());
    llama_context* ctx = MakeContext(o, p, T, T);
    llama_batch batch = llama_batch_init(T, 0, 1);
    Decode(ctx, batch, o.tokens, /*all_logits=*/true);
    std::vector<float> logits(static_cast<size_t>(T) * n_vocab);
    for (int i = 0; i < T; ++i) {
      const float* row = llama_get_logits_ith(ctx, i);
      if (!row) Die("no logits for position " + std::to_string(i));
      std::memcpy(&logits[static_cast<size_t>(i) * n_vocab], row, sizeof(float) * n_vocab);
    }
    WriteNpy(o.logits_out, logits, T, n_vocab);
    std::printf("{\"logits_out\": \"%s\", \"rows\": %d, \"vocab\": %d, \"cpu_variant\": \"%s\"}\n",
                JsonEscape(o.logits_out).c_str(), T, n_vocab, JsonEscape(variant).c_str());
    llama_batch_free(batch);
    llama_free(ctx);
  } else {
    std::mt19937 rng(o.seed);
    std::uniform_int_distribution<int> dist(0, n_vocab - 1);
    for (int P : o.prompts) {
      if (P < 1) Die("prompt length must be >= 1");
      std::vector<llama_token> toks(P);
      for (int i = 0; i < P; ++i)
        toks[i] = o.tokens.empty() ? dist(rng) : o.tokens[i % o.tokens.size()];
      llama_context* ctx = MakeContext(o, p, P, P);
      llama_batch batch = llama_batch_init(P, 0, 1);
      llama_memory_t mem = llama_get_memory(ctx);
      llama_memory_clear(mem, true);
      Decode(ctx, batch, toks, false);  // warm-up
      std::vector<double> secs, utils;
      for (int r = 0; r < o.reps; ++r) {
        llama_memory_clear(mem, true);
        const double c0 = CpuSeconds();
        auto t0 = std::chrono::steady_clock::now();
        Decode(ctx, batch, toks, false);
        auto t1 = std::chrono::steady_clock::now();
        const double wall = std::chrono::duration<double>(t1 - t0).count();
        secs.push_back(wall);
        // Share of the wall time x threads that this process got on a CPU: well under 1 means
        // another process took cores during the run (the figure is then not a clean peer).
        utils.push_back((CpuSeconds() - c0) / (wall * o.threads));
      }
      std::vector<double> sorted = secs;
      std::sort(sorted.begin(), sorted.end());
      const size_t n = sorted.size();
      const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
      std::string samples, util_list;
      for (double s : secs) samples += (samples.empty() ? "" : ", ") + std::to_string(s);
      for (double u : utils) {
        char b[32];
        std::snprintf(b, sizeof b, "%.3f", u);
        util_list += (util_list.empty() ? "" : ", ") + std::string(b);
      }
      std::printf(
          "{\"model\": \"%s\", \"desc\": \"%s\", \"n_prompt\": %d, \"n_batch\": %d, \"n_ubatch\": "
          "%d, "
          "\"threads\": %d, \"reps\": %d, \"kv_type\": \"%s\", \"flash_attn\": \"%s\", "
          "\"cpu_variant\": \"%s\", \"cpu_lib\": \"%s\", \"cpu_features\": \"%s\", "
          "\"samples_s\": [%s], \"cpu_util\": [%s], \"median_s\": %.6f, \"min_s\": %.6f, "
          "\"tokens_per_s\": %.2f, "
          "\"best_tokens_per_s\": %.2f}\n",
          JsonEscape(o.model).c_str(), JsonEscape(desc).c_str(), P, P, P, o.threads, o.reps,
          o.kv_type.c_str(), o.flash_attn.c_str(), JsonEscape(variant).c_str(),
          JsonEscape(p.cpu_lib).c_str(), JsonEscape(p.cpu_features).c_str(), samples.c_str(),
          util_list.c_str(), median, sorted.front(), P / median, P / sorted.front());
      std::fflush(stdout);
      llama_batch_free(batch);
      llama_free(ctx);
    }
  }
  p.tp_free(p.tp);
  llama_model_free(p.model);
  llama_backend_free();
  return 0;
}
