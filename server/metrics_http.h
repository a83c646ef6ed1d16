// MetricsHttpEndpoint: the minimal HTTP/1.x server behind `--metrics`. It answers
// `GET /metrics` with the Prometheus text exposition produced by a render callback, the probes
// `GET /healthz` (liveness: 200 while the process serves) and `GET /readyz` (readiness: 200 once
// the model is loaded and the store is open, 503 before and while draining), 404 for any other
// path, 405 for other methods, and closes every connection after one response. With a bearer
// token, /metrics answers 401 unless the request carries `Authorization: Bearer <token>`; the
// probes stay unauthenticated (they tell only whether the daemon is up, and the kubelet probes
// them over the pod IP).
//
// Why our own and not prometheus::Exposer: the Exposer's embedded civetweb crashed (SIGSEGV in
// its request path formatting) on the first scrape in builds that link the CUDA runtime, which
// would take the whole daemon down. A scrape endpoint needs none of civetweb's features, so one
// thread with poll() and bounded reads serves it. Requests are handled one at a time; each has a
// 1 s read deadline, an 8 KiB header cap and a 5 s write deadline, so a slow or hostile client
// (one that never reads its response, say) cannot hold it long.
//
// Thread-safety: Start and Stop from one thread; the render callback runs on the endpoint's
// thread and must be thread-safe. The destructor stops the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "core/status.h"

namespace hypic::server {

class MetricsHttpEndpoint {
 public:
  using Render = std::function<std::string()>;
  // The probes' view of the daemon; must be thread-safe. Empty: always live and ready.
  struct Health {
    bool live = true;
    bool ready = true;
    std::string detail;  // the probe's body, e.g. "draining"
  };
  using HealthFn = std::function<Health()>;
  // The paths served (the deploy manifests' probes must name one of these).
  static constexpr std::string_view kPaths[] = {"/metrics", "/healthz", "/readyz"};

  // `bearer_token` empty: /metrics is open to whoever reaches the port.
  explicit MetricsHttpEndpoint(Render render, HealthFn health = {}, std::string bearer_token = "")
      : render_(std::move(render)),
        health_(std::move(health)),
        bearer_token_(std::move(bearer_token)) {}
  ~MetricsHttpEndpoint();
  MetricsHttpEndpoint(const MetricsHttpEndpoint&) = delete;
  MetricsHttpEndpoint& operator=(const MetricsHttpEndpoint&) = delete;

  // Binds host:port (port 0 picks a free one) and starts serving. Returns the bound port, or
  // kIoError naming the address.
  Result<uint16_t> Start(const std::string& host, uint16_t port);
  void Stop();

 private:
  void Loop();
  void ServeOne(int fd);

  Render render_;
  HealthFn health_;
  const std::string bearer_token_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hypic::server
