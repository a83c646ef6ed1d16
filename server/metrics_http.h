// MetricsHttpEndpoint: the minimal HTTP/1.x server behind `--metrics`. It answers
// `GET /metrics` with the Prometheus text exposition produced by a render callback, 404 for any
// other path, 405 for other methods, and closes every connection after one response.
//
// Why our own and not prometheus::Exposer: the Exposer's embedded civetweb crashed (SIGSEGV in
// its request path formatting) on the first scrape in builds that link the CUDA runtime, which
// would take the whole daemon down. A scrape endpoint needs none of civetweb's features, so one
// thread with poll() and bounded reads serves it. Requests are handled one at a time; each has a
// 1 s read deadline and an 8 KiB header cap, so a slow or hostile client cannot hold it long.
//
// Thread-safety: Start and Stop from one thread; the render callback runs on the endpoint's
// thread and must be thread-safe. The destructor stops the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "core/status.h"

namespace hypic::server {

class MetricsHttpEndpoint {
 public:
  using Render = std::function<std::string()>;

  explicit MetricsHttpEndpoint(Render render) : render_(std::move(render)) {}
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
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hypic::server
