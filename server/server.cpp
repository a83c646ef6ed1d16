#include "server/server.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/logging.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "gpu/model/cpu_attention.h"
#include "gpu/model/cuda_forward.h"
#include "gpu/runtime/device_selection.h"
#include "gpu/runtime/model_jobs.h"
#include "server/hbm_transport.h"
#include "server/session.h"
#include "storage/entry_format.h"
#include "storage/hbm_tier.h"
#include "storage/host_tier.h"
#include "storage/redis_tier.h"
#include "storage/rocks_tier.h"

namespace hypic::server {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

constexpr auto kDrainTick = std::chrono::milliseconds(20);

// `io_threads` io_contexts (0: one per core), each to be run by one thread.
std::vector<std::unique_ptr<asio::io_context>> MakeContexts(uint32_t io_threads) {
  unsigned n = io_threads != 0 ? io_threads : static_cast<unsigned>(cpu::UsableCores());
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  for (unsigned i = 0; i < n; ++i) contexts.push_back(std::make_unique<asio::io_context>(1));
  return contexts;
}

Result<asio::ip::address> ResolveHost(const std::string& host) {
  if (host == "localhost") return asio::ip::make_address("127.0.0.1");
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    return BadRequest(fmt::format("config key 'listen': '{}' is not an IP address", host));
  }
  return addr;
}

// Sets the socket's TCP congestion control algorithm.
Status SetCongestionControl(int fd, const std::string& name) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                   static_cast<socklen_t>(name.size())) != 0) {
    return IoError(
        fmt::format("cannot set TCP congestion control '{}': {}", name, std::strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace

Server::Server(ServerConfig config)
    : config_(std::move(config)),
      contexts_(MakeContexts(config_.io_threads)),
      io_(*contexts_[0]),
      tcp_acceptor_(io_),
      unix_acceptor_(io_),
      signals_(io_),
      drain_timer_(io_) {}

Server::~Server() {
  // The samplers and probes read the store, the pool and the peers, which go before metrics_:
  // no scrape may run once teardown starts.
  if (metrics_) metrics_->StopServing();
  // Workers may still hold requests that post into the io_context: stop them first.
  if (compute_) compute_->Stop();
}

Result<std::unique_ptr<Server>> Server::Create(ServerConfig config) {
  std::error_code ec;
  const bool created = fs::create_directories(config.data_dir, ec);
  if (ec) {
    return IoError(
        fmt::format("config key 'data_dir': cannot create {}: {}", config.data_dir, ec.message()));
  }
  if (created) {  // the store's entries are the tenants' data: the daemon's account only
    fs::permissions(config.data_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) {
      return IoError(fmt::format("config key 'data_dir': cannot restrict {} to its owner: {}",
                                 config.data_dir, ec.message()));
    }
  }
  if (!config.loopback_tcp_congestion.empty()) {
    // Checked once here, so a name the kernel refuses stops startup instead of every accept.
    int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return IoError(fmt::format("socket: {}", std::strerror(errno)));
    Status cc = SetCongestionControl(probe, config.loopback_tcp_congestion);
    ::close(probe);
    if (!cc.ok()) {
      return BadRequest(fmt::format(
          "config key 'loopback_tcp_congestion': {} (net.ipv4.tcp_allowed_congestion_control "
          "lists what an unprivileged process may choose; empty keeps the system default)",
          cc.message()));
    }
  }
  std::unique_ptr<Server> s(new Server(std::move(config)));
  const ServerConfig& c = s->config_;
  s->metrics_ = std::make_unique<Metrics>();
  s->tenants_ = std::make_unique<Tenants>(c);
  Metrics* metrics_ptr = s->metrics_.get();
  s->pending_ = std::make_unique<ByteBudget>(
      c.max_pending_request_bytes,
      [metrics_ptr](int64_t delta) { metrics_ptr->AddPendingRequestBytes(delta); });

  // The model first: the HBM tier is sized beside its weights.
  const auto t0 = std::chrono::steady_clock::now();
  if (c.model != "none") {
    HYPIC_LOG_INFO("gemm: {}", cpu::GemmSummary());
    const model::ReadOptions read{
        .weights = *model::ParseWeightsDType(c.weights_dtype),
        .cuda_tf32 = c.cuda_tf32,
        .max_pass_bytes = c.max_pass_bytes.value_or(0),
        .on_pass_bytes = [metrics_ptr](int64_t delta) { metrics_ptr->AddPassBytes(delta); }};
    auto model = model::LoadModel(c.model, c.ModelCacheDir(), read);
    if (!model.ok()) return model.status().WithContext("config key 'model' (" + c.model + ")");
    s->model_ = std::move(model).value();
    const size_t resident = s->model_->resident_weight_bytes();
    const size_t stored = s->model_->checkpoint_bytes();
    HYPIC_LOG_INFO(
        "model weights: {} GEMM weights (weights_dtype {}), resident {:.1f} MiB = "
        "{:.3f}x the checkpoint's {:.1f} MiB",
        DTypeName(s->model_->weights_dtype()), c.weights_dtype, resident / 1048576.0,
        stored > 0 ? static_cast<double>(resident) / static_cast<double>(stored) : 0.0,
        stored / 1048576.0);
    HYPIC_LOG_INFO("entries: {} (entry_dtype)", c.entry_dtype.ToString());
    if (const uint64_t budget = s->model_->max_pass_bytes(); budget > 0) {
      // Per live token: a 16k-token pass's bound (pass_memory.h) over its rows.
      const uint64_t per_token =
          model::PassBytes(s->model_->config(),
                           {.live_rows = 1 << 14, .positions = 1 << 14, .logit_rows = 1}) >>
          14;
      HYPIC_LOG_INFO(
          "pass memory: max_pass_bytes {:.1f} GiB, ~{} KiB per live token: one pass "
          "of up to ~{} tokens",
          budget / 1073741824.0, per_token >> 10, budget / std::max<uint64_t>(per_token, 1));
    } else {
      HYPIC_LOG_WARN("pass memory: max_pass_bytes 0, no limit: one long prompt can exhaust memory");
    }
    HYPIC_LOG_INFO("attention: {} (head_dim {})",
                   model::AttentionKernelName(s->model_->config().head_dim,
                                              s->model_->weights_dtype() == DType::kBF16),
                   s->model_->config().head_dim);
  }

  // Devices: each resolved CUDA device is a prefill worker and the first one runs the request
  // threads' passes (the combine); without one (devices = cpu, or auto on a machine or build
  // without CUDA) the pool is CPU workers, exactly the CPU-only daemon.
  gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda);
  const int visible = cuda != nullptr && model::CudaModelKernelsBuilt() ? cuda->DeviceCount() : 0;
  std::vector<int> gpus;  // none without a model: nothing is computed
  if (c.model != "none") {
    HYPIC_ASSIGN_OR_RETURN(runtime::DeviceSelection selection,
                           runtime::DeviceSelection::Parse(c.devices));
    auto resolved = runtime::ResolveCudaDevices(selection, visible);
    if (!resolved.ok()) return resolved.status().WithContext("config key 'devices'");
    gpus = std::move(resolved).value();
  }

  // The store: HBM -> host RAM -> SSD, each present when its capacity is > 0. The HBM tier is
  // on the combine device, where a COMPOSE reads its entries in place, and new entries go there
  // first (evicted ones move down to host RAM, then SSD). A daemon that composes on the CPU
  // keeps no HBM tier: its device copies would only be copied back for every read.
  std::unique_ptr<storage::Tier> hbm, host, ssd;
  if (c.hbm_capacity.value_or(0) > 0 && !gpus.empty()) {
    // At most half of what the combine device has free beside the model's weights (uploaded at
    // its first pass): the other half is the passes' working memory.
    uint64_t capacity = *c.hbm_capacity;
    auto info = cuda->QueryDevice(gpus.front());
    const uint64_t weights = s->model_->resident_weight_bytes();
    const uint64_t room =
        info.ok() && info->free_memory > weights ? (info->free_memory - weights) / 2 : 0;
    if (capacity > room) {
      HYPIC_LOG_WARN(
          "config key 'hbm_capacity': {:.1f} MiB do not fit beside the model on cuda:{}; the "
          "hbm tier takes {:.1f} MiB (half of the free memory the weights leave)",
          capacity / 1048576.0, gpus.front(), room / 1048576.0);
      capacity = room;
    }
    if (capacity > 0) {
      auto tier = storage::HbmTier::Create(*cuda, gpus.front(), capacity);
      if (!tier.ok()) return tier.status().WithContext("config key 'hbm_capacity'");
      hbm = std::move(tier).value();
      HYPIC_LOG_INFO("store: hbm tier of {:.1f} MiB on cuda:{}", capacity / 1048576.0,
                     gpus.front());
    }
  } else if (c.hbm_capacity.value_or(0) > 0) {
    HYPIC_LOG_WARN("config key 'hbm_capacity' ignored: this daemon composes on the CPU ({})",
                   c.model == "none" ? "model none" : "no CUDA device selected");
  }
  if (c.ram_capacity.value_or(0) > 0) {
    host = std::make_unique<storage::HostTier>(*c.ram_capacity, cuda);
  }
  if (c.ssd_capacity.value_or(0) > 0) {
    storage::RocksTierOptions ro;
    ro.path = (fs::path(c.data_dir) / "ssd").string();
    ro.capacity = *c.ssd_capacity;
    auto tier = storage::RocksTier::Open(ro);
    if (!tier.ok()) return tier.status().WithContext("config key 'ssd_capacity' (SSD tier)");
    ssd = std::move(tier).value();
  }
  const bool has_hbm = hbm != nullptr;  // on the combine device
  if (!hbm && !host && !ssd) {
    return BadRequest(
        "config key 'ram_capacity': every tier has capacity 0; nothing can be cached");
  }
  storage::TierManagerOptions so;
  so.policy = c.eviction_policy == "cost" ? storage::EvictionPolicy::kCostAware
                                          : storage::EvictionPolicy::kLru;
  so.placement = hbm    ? storage::TierKind::kHbm
                 : host ? storage::TierKind::kHost
                        : storage::TierKind::kSsd;
  std::unique_ptr<storage::RemoteTier> remote;
  if (!c.remote_store.empty()) {
    storage::RedisTierOptions ro;
    ro.address = *storage::ParseRedisUrl(c.remote_store);  // checked by config::Load
    ro.prefix = c.remote_prefix;
    ro.chunk_bytes = c.remote_chunk_bytes;
    ro.connect_timeout = ro.command_timeout = std::chrono::milliseconds(c.remote_timeout_ms);
    auto tier = storage::RedisTier::Create(ro);
    if (!tier.ok()) return tier.status().WithContext("config key 'remote_store'");
    remote = std::move(tier).value();
    so.remote_min_tokens = c.remote_min_tokens;
  }
  auto store = storage::TierManager::Create(so, std::move(hbm), std::move(host), std::move(ssd),
                                            std::move(remote));
  if (!store.ok()) return store.status().WithContext("opening the store");
  s->store_ = std::move(store).value();

  if (c.model != "none") {
    runtime::PoolOptions po;
    if (gpus.empty()) {
      po.kind = gpu::BackendKind::kCpu;
      po.cpu_workers = static_cast<int>(c.prefill_workers);
      HYPIC_LOG_INFO("devices: cpu ({}; {} CUDA device(s) usable)", c.devices, visible);
    } else {
      po.kind = gpu::BackendKind::kCuda;
      po.cuda_devices = gpus;
      po.cpu_workers = static_cast<int>(c.cpu_workers_with_gpu);
      s->combine_device_ = {gpu::BackendKind::kCuda, gpus.front()};
      for (int d : gpus) {
        auto info = cuda->QueryDevice(d);
        HYPIC_LOG_INFO("devices: cuda:{} {} ({:.1f} GiB, sm_{}{}){}", d,
                       info.ok() ? info->name : "?",
                       info.ok() ? info->total_memory / 1073741824.0 : 0.0,
                       info.ok() ? info->compute_major : 0, info.ok() ? info->compute_minor : 0,
                       d == gpus.front() ? ", combine" : "");
      }
      HYPIC_LOG_INFO("devices: {} CPU prefill worker(s) beside the GPUs", po.cpu_workers);
    }
    std::vector<PeerOptions> peer_options;
    for (const PeerConfig& pc : c.peers) {
      PeerOptions o;
      o.address = pc.address.ToString();
      o.token = pc.token.empty() ? c.peer_token : pc.token;
      o.weight = pc.weight;
      o.concurrency = pc.concurrency;
      o.timeout = std::chrono::milliseconds(c.peer_timeout_ms);
      o.backoff_min = std::chrono::milliseconds(c.peer_backoff_ms);
      o.backoff_max = std::max(o.backoff_min, o.backoff_max);
      peer_options.push_back(std::move(o));
    }
    s->peers_ = MakePeers(peer_options, s->model_, c.entry_dtype);
    std::vector<std::unique_ptr<runtime::Worker>> peer_workers;
    for (const auto& peer : s->peers_) {
      for (auto& w : peer->MakeWorkers()) peer_workers.push_back(std::move(w));
      HYPIC_LOG_INFO("peer {}: {} connection(s), weight {}", peer->options().address,
                     peer->options().concurrency, peer->options().weight);
    }
    auto pool = runtime::WorkerPool::Create(po, std::move(peer_workers));
    if (!pool.ok()) return pool.status().WithContext("config keys 'devices', 'prefill_workers'");
    s->pool_ = std::move(pool).value();
    // Every pass in the daemon (warm COMPOSE, prefix mode, PREFILL) gets one worker's share of
    // the cores: more threads than that made a compose 2.3x slower while the workers ran
    // (docs/benchmarks.md, issue 7).
    if (s->pool_->cpu_budget() > 0) cpu::SetComputeThreads(s->pool_->cpu_budget());
    if (has_hbm) {
      s->transport_ = std::make_unique<HbmTransport>(*s->store_, s->combine_device_.index);
    } else {
      s->transport_ = std::make_unique<runtime::HostTransport>();
    }
    // The priors assume 50 GFLOP/s per CPU worker and 50 TFLOP/s per GPU (a third of an H100's
    // bf16 tensor-core rate); each kind's measured prefills then refine its own model.
    const runtime::CostShape shape = runtime::CostShapeOf(s->model_->config());
    s->cost_ =
        std::make_unique<runtime::CostModels>(runtime::CostModel::PriorFromShape(shape, 5e10),
                                              runtime::CostModel::PriorFromShape(shape, 5e13));
    storage::TierManager* tiers = s->store_.get();
    s->scheduler_ = std::make_unique<runtime::MissScheduler>(
        *s->pool_, *s->transport_, *s->cost_, [tiers](const runtime::EntryPtr& entry) {
          // Stored as soon as a worker finishes it; a full store only costs a later miss.
          auto bytes = storage::Serialize(*entry);
          Status st = bytes.ok() ? tiers->Put(*bytes) : bytes.status();
          if (!st.ok()) HYPIC_LOG_WARN("storing entry {}: {}", entry->key().ToHex(), st.ToString());
        });
    if (uint64_t bytes = c.prefix_cache_capacity.value_or(0); bytes > 0) {
      model::PrefixCacheOptions pco;
      pco.capacity_bytes = bytes;
      s->prefix_cache_ = std::make_unique<model::PrefixCache>(s->model_, pco);
    }
    HYPIC_LOG_INFO("model {} loaded in {:.1f} s (fingerprint {})", c.model,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   s->model_->fingerprint().ToHex());
  }
  Metrics* metrics = s->metrics_.get();
  storage::TierManager* store_ptr = s->store_.get();
  metrics->SetTierSampler([store_ptr] {
    std::vector<TierSample> samples;
    for (const auto& t : store_ptr->Stats()) {
      TierSample ts;
      ts.tier = std::string(storage::TierKindName(t.kind));
      ts.hits = t.counters.hits;
      ts.misses = t.counters.misses;
      ts.evictions = t.counters.evictions;
      ts.checksum_failures = t.counters.checksum_failures;
      ts.bytes = t.counters.bytes;
      ts.capacity_bytes = t.counters.capacity;
      ts.entries = t.counters.entries;
      ts.io_errors = t.counters.io_errors;
      ts.degraded = t.counters.degraded ? 1 : 0;
      ts.bytes_read = t.counters.bytes_read;
      ts.bytes_written = t.counters.bytes_written;
      ts.nodes = t.counters.nodes;
      ts.nodes_degraded = t.counters.nodes_degraded;
      ts.redirects = t.counters.redirects;
      samples.push_back(std::move(ts));
    }
    return samples;
  });
  std::vector<std::shared_ptr<Peer>> peers = s->peers_;
  metrics->SetPeerSampler([peers] {
    std::vector<PeerSample> samples;
    for (const auto& peer : peers) {
      const PeerStats p = peer->Stats();
      samples.push_back(PeerSample{p.address, p.up ? 1u : 0u, p.jobs_ok, p.jobs_failed, p.timeouts,
                                   p.errors, p.bad_entries, p.refusals, p.bytes_received,
                                   static_cast<uint64_t>(std::llround(p.tokens_per_s))});
    }
    return samples;
  });
  metrics->SetWorkerSampler([pool = s->pool_.get()] {
    std::vector<WorkerSample> samples;
    for (size_t i = 0; pool != nullptr && i < pool->size(); ++i) {
      const runtime::Worker& w = pool->worker(i);
      if (w.remote()) continue;  // peers have their own hypic_peer_* series
      samples.push_back(WorkerSample{w.name(), w.healthy() ? 1u : 0u, w.device_errors()});
    }
    return samples;
  });
  s->compute_ = std::make_unique<ComputeQueue>(
      s->config_.compute_workers, s->config_.compute_queue,
      [metrics](int64_t depth) { metrics->SetComputeQueueDepth(depth); });
  Server* self = s.get();
  ServerControl control{[self](const std::string& reason) { self->RequestShutdown(reason); },
                        [self] { return self->connection_count(); },
                        [peers] {
                          std::vector<PeerStats> stats;
                          for (const auto& peer : peers) stats.push_back(peer->Stats());
                          return stats;
                        }};
  s->handlers_ = std::make_unique<Handlers>(
      s->config_, *s->metrics_, *s->compute_, std::move(control), *s->store_, s->model_,
      s->scheduler_.get(), s->prefix_cache_.get(), s->combine_device_);
  return s;
}

Status Server::Start() {
  // TCP listener.
  HYPIC_ASSIGN_OR_RETURN(asio::ip::address addr, ResolveHost(config_.listen.host));
  asio::ip::tcp::endpoint ep(addr, config_.listen.port);
  boost::system::error_code ec;
  tcp_acceptor_.open(ep.protocol(), ec);
  if (!ec) tcp_acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) tcp_acceptor_.bind(ep, ec);
  if (!ec) tcp_acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return IoError(fmt::format("config key 'listen': cannot listen on {}: {}",
                               config_.listen.ToString(), ec.message()));
  }
  tcp_port_ = tcp_acceptor_.local_endpoint().port();

  // Unix socket: owner-only, so only the daemon's account (and root) can connect; peers are
  // still checked by uid (SO_PEERCRED) before they get the admin grant.
  unix_path_ = config_.UnixSocketPath();
  if (!unix_path_.empty()) {
    if (unix_path_.size() >= sizeof(sockaddr_un::sun_path)) {
      return BadRequest(fmt::format("config key 'unix_socket': '{}' is longer than {} bytes",
                                    unix_path_, sizeof(sockaddr_un::sun_path) - 1));
    }
    // A live daemon on the same path must not be displaced; a stale file is removed.
    asio::local::stream_protocol::socket probe(io_);
    probe.connect(asio::local::stream_protocol::endpoint(unix_path_), ec);
    if (!ec) {
      return IoError(fmt::format("config key 'unix_socket': another daemon serves {}", unix_path_));
    }
    // Only a stale socket is removed: never a file, directory or link someone put there.
    struct stat st {};
    if (::lstat(unix_path_.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return IoError(
            fmt::format("config key 'unix_socket': {} exists and is not a socket; not removing it",
                        unix_path_));
      }
      ::unlink(unix_path_.c_str());
    }
    mode_t old_mask = ::umask(0177);
    unix_acceptor_.open(asio::local::stream_protocol(), ec);
    if (!ec) unix_acceptor_.bind(asio::local::stream_protocol::endpoint(unix_path_), ec);
    ::umask(old_mask);
    if (!ec) unix_acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return IoError(fmt::format("config key 'unix_socket': cannot listen on {}: {}", unix_path_,
                                 ec.message()));
    }
  }

  uint16_t metrics_port = 0;
  if (config_.metrics) {
    // Live while the process serves; ready once Open loaded the model and opened the store
    // (which happened before this point) and the listeners are up, and not while draining.
    auto port = metrics_->Serve(
        *config_.metrics,
        [this] {
          MetricsHttpHealth h;
          const bool draining = draining_.load();
          h.ready = serving_.load() && !draining && store_ != nullptr &&
                    (model_ != nullptr || config_.model == "none");
          h.detail = draining ? "draining" : h.ready ? "" : "starting";
          return h;
        },
        config_.metrics_token);
    if (!port.ok()) return port.status().WithContext("config key 'metrics'");
    metrics_port = *port;
  }

  signals_.add(SIGINT);
  signals_.add(SIGTERM);
  signals_.async_wait([this](const boost::system::error_code& err, int signo) {
    if (!err) BeginDrain(fmt::format("signal {}", signo == SIGTERM ? "SIGTERM" : "SIGINT"));
  });

  AcceptTcp();
  if (unix_acceptor_.is_open()) AcceptUnix();
  serving_ = true;
  HYPIC_LOG_INFO("hypicd serving on {}:{}{}{} (model {}, data dir {})", config_.listen.host,
                 tcp_port_, unix_path_.empty() ? "" : " and unix:" + unix_path_,
                 config_.metrics ? fmt::format(", metrics on :{}", metrics_port) : "",
                 config_.model, config_.data_dir);
  return WriteReadyFile(metrics_port);
}

Status Server::WriteReadyFile(uint16_t metrics_port) const {
  if (config_.ready_file.empty()) return Status::Ok();
  std::string text = fmt::format("tcp={}:{}\n", config_.listen.host, tcp_port_);
  if (!unix_path_.empty()) text += fmt::format("unix={}\n", unix_path_);
  if (config_.metrics) text += fmt::format("metrics={}:{}\n", config_.metrics->host, metrics_port);
  text += fmt::format("pid={}\n", ::getpid());
  // Written whole then renamed, so a watcher never reads half a file.
  std::string tmp = config_.ready_file + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.good()) {
      return IoError(fmt::format("config key 'ready_file': cannot write {}", tmp));
    }
  }
  std::error_code ec;
  fs::rename(tmp, config_.ready_file, ec);
  if (ec) {
    return IoError(fmt::format("config key 'ready_file': cannot write {}: {}", config_.ready_file,
                               ec.message()));
  }
  return Status::Ok();
}

asio::io_context& Server::NextContext() {
  asio::io_context& c = *contexts_[next_context_];
  next_context_ = (next_context_ + 1) % contexts_.size();
  return c;
}

void Server::AcceptTcp() {
  // The socket is created on the context that will serve it, so its I/O completes there.
  asio::io_context& context = NextContext();
  tcp_acceptor_.async_accept(context, [this, &context](const boost::system::error_code& ec,
                                                       asio::ip::tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || draining_) return;
      // EMFILE and friends: keep accepting; the error is transient or the limit will show.
      HYPIC_LOG_WARN("accept (tcp): {}", ec.message());
    } else {
      boost::system::error_code opt_ec;
      socket.set_option(asio::ip::tcp::no_delay(true), opt_ec);
      auto remote = socket.remote_endpoint(opt_ec);
      bool local = !opt_ec && remote.address().is_loopback();
      if (local && !config_.loopback_tcp_congestion.empty()) {
        Status cc = SetCongestionControl(socket.native_handle(), config_.loopback_tcp_congestion);
        if (!cc.ok()) HYPIC_LOG_WARN("accept (tcp): {}", cc.ToString());
      }
      std::string peer =
          opt_ec ? "tcp:?" : fmt::format("tcp:{}:{}", remote.address().to_string(), remote.port());
      // Never trusted with admin: any local account can reach a loopback port.
      Admit(context, std::move(socket), /*trusted=*/false, std::move(peer),
            opt_ec ? "?" : remote.address().to_string());
    }
    if (!draining_) AcceptTcp();
  });
}

void Server::AcceptUnix() {
  asio::io_context& context = NextContext();
  unix_acceptor_.async_accept(
      context, [this, &context](const boost::system::error_code& ec,
                                asio::local::stream_protocol::socket socket) {
        if (ec) {
          if (ec == asio::error::operation_aborted || draining_) return;
          HYPIC_LOG_WARN("accept (unix): {}", ec.message());
        } else {
          // The kernel's word for who connected: the daemon's own account or root is trusted.
          ucred cred{};
          socklen_t len = sizeof(cred);
          const bool known =
              ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
          const bool trusted = known && (cred.uid == ::geteuid() || cred.uid == 0);
          std::string peer = known ? fmt::format("unix:uid={}", cred.uid) : "unix:uid=?";
          // No per-peer pre-auth count: only the daemon's account and root can connect (0600).
          Admit(context, std::move(socket), trusted, std::move(peer), /*address=*/"");
        }
        if (!draining_) AcceptUnix();
      });
}

template <typename ProtoSocket>
void Server::Admit(asio::io_context& context, ProtoSocket socket, bool trusted, std::string peer,
                   std::string address) {
  uint64_t id = next_session_id_.fetch_add(1);
  auto session = std::make_shared<Session>(*this, asio::make_strand(context),
                                           Session::Socket(std::move(socket)), id, trusted,
                                           std::move(peer), address);
  enum class Refusal { kNone, kDraining, kMaxConnections, kPreAuth } refusal = Refusal::kNone;
  {
    MutexLock lock(&mu_);
    if (draining_) {
      refusal = Refusal::kDraining;
    } else if (sessions_.size() >= config_.max_connections) {
      refusal = Refusal::kMaxConnections;
    } else if (!address.empty() && preauth_[address] >= config_.max_preauth_connections_per_peer) {
      refusal = Refusal::kPreAuth;
    } else {
      sessions_.emplace(id, session);
      if (!address.empty()) ++preauth_[address];
    }
    if (refusal != Refusal::kNone && !address.empty() && preauth_[address] == 0) {
      preauth_.erase(address);
    }
  }
  switch (refusal) {
    case Refusal::kNone: session->Start(); return;
    case Refusal::kDraining:
      metrics_->ConnectionDropped("draining");
      session->Refuse(StatusCode::kShuttingDown, "the daemon is shutting down");
      return;
    case Refusal::kMaxConnections:
      metrics_->ConnectionDropped("max_connections");
      session->Refuse(StatusCode::kBusy, fmt::format("too many connections (max_connections {})",
                                                     config_.max_connections));
      return;
    case Refusal::kPreAuth:
      metrics_->ConnectionDropped("preauth_per_peer");
      session->Refuse(StatusCode::kBusy,
                      fmt::format("too many connections from {} without HELLO "
                                  "(max_preauth_connections_per_peer {})",
                                  address, config_.max_preauth_connections_per_peer));
      return;
  }
}

void Server::EndPreAuth(const std::string& address) {
  MutexLock lock(&mu_);
  auto it = preauth_.find(address);
  if (it != preauth_.end() && --it->second == 0) preauth_.erase(it);
}

void Server::Unregister(uint64_t id) {
  MutexLock lock(&mu_);
  sessions_.erase(id);
}

size_t Server::connection_count() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

void Server::RequestShutdown(const std::string& reason) {
  asio::post(io_, [this, reason] { BeginDrain(reason); });
}

void Server::BeginDrain(const std::string& reason) {
  if (draining_.exchange(true)) return;
  HYPIC_LOG_INFO("draining ({}): no new connections; in-flight requests may finish for {} ms",
                 reason, config_.drain_timeout_ms);
  drain_started_ = std::chrono::steady_clock::now();
  boost::system::error_code ignored;
  tcp_acceptor_.close(ignored);
  if (unix_acceptor_.is_open()) {
    unix_acceptor_.close(ignored);
    ::unlink(unix_path_.c_str());
  }
  signals_.cancel(ignored);
  compute_->Close();
  std::vector<std::shared_ptr<Session>> live;
  {
    MutexLock lock(&mu_);
    for (auto& [id, weak] : sessions_) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->Drain();
  OnDrainTick();
}

void Server::OnDrainTick() {
  size_t open = connection_count();
  auto elapsed = std::chrono::steady_clock::now() - drain_started_;
  bool expired = elapsed > std::chrono::milliseconds(config_.drain_timeout_ms);
  if (open == 0) {
    StopContexts();
    return;
  }
  if (expired) {
    HYPIC_LOG_WARN("drain timeout: closing {} connection(s) still open", open);
    std::vector<std::shared_ptr<Session>> live;
    {
      MutexLock lock(&mu_);
      for (auto& [id, weak] : sessions_) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
      // Sessions that are already gone but not yet unregistered must not hold the drain.
      sessions_.clear();
    }
    for (auto& s : live) s->Abort();
  }
  drain_timer_.expires_after(kDrainTick);
  drain_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) OnDrainTick();
  });
}

void Server::StopContexts() {
  for (auto& g : guards_) g.reset();
  for (auto& c : contexts_) c->stop();
}

int Server::Run() {
  // Idle contexts (no connection yet) must keep running until the drain stops them.
  for (auto& c : contexts_) guards_.push_back(asio::make_work_guard(*c));
  std::vector<std::thread> threads;
  threads.reserve(contexts_.size());
  for (auto& c : contexts_) threads.emplace_back([ctx = c.get()] { ctx->run(); });
  for (auto& t : threads) t.join();
  compute_->Stop();
  Status flushed = handlers_->Flush();
  if (!flushed.ok()) {
    HYPIC_LOG_ERROR("flush at shutdown failed: {}", flushed.ToString());
    return 1;
  }
  HYPIC_LOG_INFO("hypicd stopped cleanly");
  return 0;
}

}  // namespace hypic::server
