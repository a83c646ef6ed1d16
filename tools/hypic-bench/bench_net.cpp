// `hypic-bench net`: the network figures of docs/benchmarks.md (issue 6). It starts a private
// hypicd (no model, RAM tier only) and a private redis-server (Debian's; --save '' --appendonly
// no) on free loopback ports, stores the same bytes in both, and measures side by side in one
// run:
//   - GET throughput and p50/p99 latency for 1, 4 and 16 MiB values at 1, 8 and 64
//     connections (one blocking client thread per connection, closed loop);
//   - HAS probes/s for batches of 64 keys (half present), against Redis's EXISTS k1..k64;
//   - for both, the CPU time per operation of the server process and of the client threads,
//     which moves far less with other load on the machine than throughput does.
// Both are driven by minimal blocking clients written here (Lean for hypicd, Resp for Redis:
// GET, SET, EXISTS) that read replies straight into reused buffers, as a tuned client would;
// Lean also verifies every reply's body checksum as the bytes arrive. hypic::client only
// stores the data. Each point is measured --repeat times per system, alternating hypicd and
// Redis, and the medians are reported. --server-cpus pins both servers to the same CPUs
// (hypicd then runs one io thread per CPU; Redis is single-threaded), --client-cpus the client
// threads. --unix drives both over unix sockets instead (the same-host sidecar's other
// transport; no TCP, so no congestion control either). Both servers are stopped afterwards.
// Target: hypicd GET >= 1.5x Redis for MiB-sized values, at a lower p99.
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "protocol/decoder.h"
#include "protocol/messages.h"
#include "storage/entry_format.h"
#include "storage/synthetic_entry.h"
#include "tools/common/subcommand.h"

extern char** environ;

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::bench_net {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Options {
  std::vector<int> sizes_mib = {1, 4, 16};
  std::vector<int> conns = {1, 8, 64};
  double seconds = 2.0;
  int has_batch = 64;
  std::string hypicd;
  std::string redis = "redis-server";
  bool json = false;
  int repeat = 3;                // measurements per point and system; medians are reported
  std::vector<int> server_cpus;  // both servers run on these CPUs (empty: all)
  std::vector<int> client_cpus;  // every client thread runs on these CPUs (empty: all)
  bool unix_sockets = false;     // both servers over unix sockets instead of loopback TCP
};

// Pins the calling thread to `cpus` (no-op when empty); returns the mask it had. A child
// spawned from the thread inherits the mask, which is how both servers get the same CPUs.
cpu_set_t PinThread(const std::vector<int>& cpus) {
  cpu_set_t old;
  CPU_ZERO(&old);
  ::pthread_getaffinity_np(::pthread_self(), sizeof(old), &old);
  if (cpus.empty()) return old;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
  return old;
}

// A child process (hypicd or redis-server) with output to a log file; SIGTERM on destruction.
class Child {
 public:
  static Result<std::unique_ptr<Child>> Spawn(std::vector<std::string> args, const std::string& log,
                                              const std::vector<int>& cpus) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    cpu_set_t old = PinThread(cpus);
    int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    ::pthread_setaffinity_np(::pthread_self(), sizeof(old), &old);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return IoError(fmt::format("cannot start {}: {}", args[0], std::strerror(rc)));
    auto c = std::make_unique<Child>();
    c->pid_ = pid;
    return c;
  }
  ~Child() { Stop(); }
  // CPU seconds (user + system, all threads) the process has used so far; 0 when unknown.
  double CpuSeconds() const {
    std::ifstream f(fmt::format("/proc/{}/stat", pid_));
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t close = stat.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) return 0;
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    double ticks = 0;
    // After the name: state is field 3; utime and stime are fields 14 and 15.
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i >= 14) ticks += std::stod(field);
    }
    return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  bool Exited() {
    int st = 0;
    return pid_ < 0 || ::waitpid(pid_, &st, WNOHANG) == pid_;
  }
  void Stop() {
    if (pid_ < 0) return;
    ::kill(pid_, SIGTERM);
    int st = 0;
    for (int i = 0; i < 500 && ::waitpid(pid_, &st, WNOHANG) != pid_; ++i) {
      std::this_thread::sleep_for(10ms);
      if (i == 499) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
      }
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Where a server listens: 127.0.0.1:port, or the unix socket at `path` when it is set.
struct Endpoint {
  uint16_t port = 0;
  std::string path;
};

// A blocking connection to `at` (both benchmark clients use it): TCP with Nagle off, or a unix
// stream socket. The TCP client end keeps the system's congestion control; only the replies,
// which the servers send, carry the bulk.
Result<int> ConnectTo(const Endpoint& at, std::string_view server) {
  const bool unix_socket = !at.path.empty();
  int fd = ::socket(unix_socket ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return IoError(fmt::format("{} socket failed", server));
  int rc = -1;
  if (unix_socket) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (at.path.size() >= sizeof(a.sun_path)) {
      ::close(fd);
      return BadRequest(fmt::format("{} socket path too long: {}", server, at.path));
    }
    std::memcpy(a.sun_path, at.path.c_str(), at.path.size() + 1);
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(at.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0) {
    ::close(fd);
    return IoError(fmt::format("{} connect failed", server));
  }
  if (!unix_socket) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

// The minimal RESP client: one connection, blocking, commands as arrays of bulk strings.
class Resp {
 public:
  static Result<Resp> Connect(const Endpoint& at) {
    HYPIC_ASSIGN_OR_RETURN(int fd, ConnectTo(at, "redis"));
    return Resp(fd);
  }
  Resp(Resp&& o) noexcept : fd_(o.fd_), buf_(std::move(o.buf_)), pos_(o.pos_) { o.fd_ = -1; }
  Resp& operator=(Resp&&) = delete;
  ~Resp() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Sends the command (the last argument may be a large value, sent without copying).
  Status Command(const std::vector<std::string_view>& args) {
    std::string head = fmt::format("*{}\r\n", args.size());
    std::vector<std::string_view> parts;
    std::vector<std::string> prefixes;
    prefixes.reserve(args.size());
    for (auto a : args) prefixes.push_back(fmt::format("${}\r\n", a.size()));
    std::string small = head;
    for (size_t i = 0; i < args.size(); ++i) {
      small += prefixes[i];
      if (i + 1 < args.size() || args[i].size() < 4096) {
        small.append(args[i]);
        small += "\r\n";
      } else {
        HYPIC_RETURN_IF_ERROR(SendAll(small));
        HYPIC_RETURN_IF_ERROR(SendAll(args[i]));
        small = "\r\n";
      }
    }
    return SendAll(small);
  }
  // Reads a reply: bulk into `out` (resized), or a simple/integer line into `line`.
  Status Reply(std::vector<char>* out, std::string* line) {
    std::string l;
    HYPIC_RETURN_IF_ERROR(ReadLine(&l));
    if (l.empty()) return IoError("empty RESP line");
    if (l[0] == '-') return Internal("redis: " + l);
    if (l[0] != '$') {
      if (line) *line = l;
      return Status::Ok();
    }
    long n = std::stol(l.substr(1));
    if (n < 0) return NotFound("redis: nil");
    out->resize(static_cast<size_t>(n) + 2);
    HYPIC_RETURN_IF_ERROR(ReadExact(out->data(), out->size()));
    out->resize(static_cast<size_t>(n));
    return Status::Ok();
  }

 private:
  explicit Resp(int fd) : fd_(fd) {}
  Status SendAll(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return IoError("redis send");
      s.remove_prefix(static_cast<size_t>(n));
    }
    return Status::Ok();
  }
  Status Fill() {
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return IoError("redis recv");
    buf_.append(tmp, static_cast<size_t>(n));
    return Status::Ok();
  }
  Status ReadLine(std::string* l) {
    for (;;) {
      size_t e = buf_.find("\r\n", pos_);
      if (e != std::string::npos) {
        *l = buf_.substr(pos_, e - pos_);
        pos_ = e + 2;
        return Status::Ok();
      }
      HYPIC_RETURN_IF_ERROR(Fill());
    }
  }
  // Buffered bytes first, then straight from the socket into `dst`.
  Status ReadExact(char* dst, size_t n) {
    size_t have = std::min(n, buf_.size() - pos_);
    std::memcpy(dst, buf_.data() + pos_, have);
    pos_ += have;
    while (have < n) {
      ssize_t r = ::recv(fd_, dst + have, n - have, 0);
      if (r <= 0) return IoError("redis recv");
      have += static_cast<size_t>(r);
    }
    return Status::Ok();
  }
  int fd_ = -1;
  std::string buf_;
  size_t pos_ = 0;
};

// The hypicd side's minimal client, the counterpart of Resp: one blocking connection that
// reads each reply header, then its ext and body straight into reused buffers, and verifies the
// body checksum (which Resp has no equivalent of). The library client (hypic::client) sets up
// the data; the loops use this so both servers are driven by equally lean clients.
class Lean {
 public:
  static Result<Lean> Connect(const Endpoint& at) {
    HYPIC_ASSIGN_OR_RETURN(int fd, ConnectTo(at, "hypicd"));
    Lean c(fd);
    protocol::HelloRequest hello;
    hello.client_name = "hypic-bench";
    hello.features = protocol::kFeatureXxh3;
    HYPIC_RETURN_IF_ERROR(c.Call(protocol::Opcode::kHello, {}, protocol::Encode(hello)));
    return c;
  }
  Lean(Lean&& o) noexcept
      : fd_(o.fd_),
        rbuf_(o.rbuf_),
        rpos_(o.rpos_),
        rlen_(o.rlen_),
        ext_(std::move(o.ext_)),
        body_(std::move(o.body_)),
        decoder_(o.decoder_) {
    o.fd_ = -1;
  }
  Lean& operator=(Lean&&) = delete;
  ~Lean() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Sends one request and reads its reply into body(); the reply status becomes the Status.
  Status Call(protocol::Opcode op, const Hash128& key, protocol::ByteSpan body = {}) {
    protocol::FrameHeader h;
    h.opcode = op;
    h.request_id = ++id_;
    h.key = key;
    HYPIC_ASSIGN_OR_RETURN(auto header, protocol::MakeHeader(h, {}, body));
    HYPIC_RETURN_IF_ERROR(SendAll(header.data(), header.size()));
    if (!body.empty()) HYPIC_RETURN_IF_ERROR(SendAll(body.data(), body.size()));
    std::array<std::byte, protocol::kHeaderSize> in;
    HYPIC_RETURN_IF_ERROR(RecvAll(in.data(), in.size(), nullptr));
    protocol::Frame f;
    size_t consumed = 0;
    auto st = decoder_.Decode(in, &consumed, &f);
    if (st != protocol::DecodeStatus::kNeedMore && st != protocol::DecodeStatus::kOk) {
      return Corruption(std::string(protocol::DecodeStatusName(st)));
    }
    ext_.resize(f.header.ext_len);
    body_.resize(f.header.body_len);  // reused: no allocation once the size is seen
    // Verified as it arrives, as hypic::client does: each piece is hashed while in cache.
    protocol::BodyHasher hasher(f.header.checksum_kind);
    HYPIC_RETURN_IF_ERROR(RecvAll(ext_.data(), ext_.size(), &hasher));
    HYPIC_RETURN_IF_ERROR(RecvAll(body_.data(), body_.size(), &hasher));
    if (hasher.Digest() != f.header.body_checksum) return BadChecksum("reply body checksum");
    if (f.header.request_id != h.request_id) return Internal("reply id mismatch");
    if (f.header.status != 0) return Status(static_cast<StatusCode>(f.header.status), "reply");
    return Status::Ok();
  }
  const protocol::Bytes& body() const { return body_; }

 private:
  static protocol::DecodeLimits Limits() {
    protocol::DecodeLimits l;
    l.max_body = uint64_t{1} << 32;
    return l;
  }
  explicit Lean(int fd) : fd_(fd), decoder_(protocol::Decoder::Role::kClient, Limits()) {}
  Status SendAll(const std::byte* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w <= 0) return IoError("hypicd send");
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  // Buffered bytes first; small reads refill the buffer (one recv serves header, ext and a
  // small body), large ones go straight into `p`, as Resp does, at most kHashChunk at a time so
  // `hasher` (when set) sees each piece while it is in cache.
  Status RecvAll(std::byte* p, size_t n, protocol::BodyHasher* hasher) {
    size_t have = std::min(n, rlen_ - rpos_);
    std::memcpy(p, rbuf_.data() + rpos_, have);
    rpos_ += have;
    size_t got = have;
    if (hasher) hasher->Update({p, got});
    while (got < n) {
      size_t want = n - got;
      std::byte* dst = p + got;
      size_t r = 0;
      if (want < rbuf_.size()) {
        ssize_t k = ::recv(fd_, rbuf_.data(), rbuf_.size(), 0);
        if (k <= 0) return IoError("hypicd recv");
        rlen_ = static_cast<size_t>(k);
        r = std::min(want, rlen_);
        std::memcpy(dst, rbuf_.data(), r);
        rpos_ = r;
      } else {
        ssize_t k = ::recv(fd_, dst, std::min(want, kHashChunk), 0);
        if (k <= 0) return IoError("hypicd recv");
        r = static_cast<size_t>(k);
      }
      if (hasher) hasher->Update({dst, r});
      got += r;
    }
    return Status::Ok();
  }
  static constexpr size_t kHashChunk = 256 << 10;
  int fd_ = -1;
  uint64_t id_ = 0;
  std::array<std::byte, 16384> rbuf_{};
  size_t rpos_ = 0, rlen_ = 0;
  protocol::Bytes ext_, body_;
  protocol::Decoder decoder_;
};

struct Point {
  std::string system, op;
  int size_mib = 0;
  int conns = 0;
  double ops_per_s = 0, gb_per_s = 0, p50_ms = 0, p99_ms = 0;
  // CPU time per operation: the server process's, and the client threads' together. These
  // move far less than throughput with other load on the machine.
  double server_cpu_us = 0, client_cpu_us = 0;
  uint64_t errors = 0;
};

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(i), v.end());
  return v[i];
}

// Runs `conns` threads, each calling `make_worker()` once for its connection and then the
// returned operation in a closed loop for `seconds`. Each op returns its bytes, or -1 on error.
template <typename MakeWorker>
Point Measure(const std::string& system, const std::string& op, int size_mib, int conns,
              double seconds, const std::vector<int>& cpus, const Child& server,
              MakeWorker make_worker) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(conns));
  std::vector<double> client_cpu(static_cast<size_t>(conns), 0);
  std::vector<uint64_t> bytes(static_cast<size_t>(conns), 0), errors(static_cast<size_t>(conns), 0);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  Clock::time_point end;
  for (int t = 0; t < conns; ++t) {
    threads.emplace_back([&, t] {
      PinThread(cpus);
      auto worker = make_worker();
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      double cpu0 = ThreadCpuSeconds();
      auto& my = lat[static_cast<size_t>(t)];
      while (Clock::now() < end) {
        auto t0 = Clock::now();
        int64_t n = worker ? worker() : -1;
        if (n < 0) {
          ++errors[static_cast<size_t>(t)];
          if (!worker) break;
          continue;
        }
        my.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        bytes[static_cast<size_t>(t)] += static_cast<uint64_t>(n);
      }
      client_cpu[static_cast<size_t>(t)] = ThreadCpuSeconds() - cpu0;
    });
  }
  while (ready.load() < conns) std::this_thread::sleep_for(1ms);
  double server_cpu0 = server.CpuSeconds();
  auto start = Clock::now();
  end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go = true;
  for (auto& th : threads) th.join();
  double wall = std::chrono::duration<double>(Clock::now() - start).count();
  double server_cpu = server.CpuSeconds() - server_cpu0;
  std::vector<double> all;
  uint64_t total_bytes = 0, errs = 0;
  for (int t = 0; t < conns; ++t) {
    all.insert(all.end(), lat[static_cast<size_t>(t)].begin(), lat[static_cast<size_t>(t)].end());
    total_bytes += bytes[static_cast<size_t>(t)];
    errs += errors[static_cast<size_t>(t)];
  }
  Point p;
  p.system = system;
  p.op = op;
  p.size_mib = size_mib;
  p.conns = conns;
  p.ops_per_s = static_cast<double>(all.size()) / wall;
  p.gb_per_s = static_cast<double>(total_bytes) / wall / 1e9;
  p.p50_ms = Percentile(all, 0.50);
  p.p99_ms = Percentile(all, 0.99);
  p.errors = errs;
  double ops = std::max<double>(1, static_cast<double>(all.size()));
  p.server_cpu_us = server_cpu / ops * 1e6;
  for (double c : client_cpu) p.client_cpu_us += c;
  p.client_cpu_us = p.client_cpu_us / ops * 1e6;
  return p;
}

// The point whose every figure is the median over `reps` (errors: the sum).
Point MedianPoint(std::vector<Point> reps) {
  auto median = [&](double Point::*f) {
    std::vector<double> v;
    for (const auto& r : reps) v.push_back(r.*f);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Point p = reps.front();
  p.ops_per_s = median(&Point::ops_per_s);
  p.gb_per_s = median(&Point::gb_per_s);
  p.p50_ms = median(&Point::p50_ms);
  p.p99_ms = median(&Point::p99_ms);
  p.server_cpu_us = median(&Point::server_cpu_us);
  p.client_cpu_us = median(&Point::client_cpu_us);
  p.errors = 0;
  for (const auto& r : reps) p.errors += r.errors;
  return p;
}

// Measures both systems `repeat` times, alternating, so drift in the machine's load touches
// both alike; returns {hypicd, redis}, each the median of its repetitions.
template <typename MeasureOne>
std::array<Point, 2> MeasurePair(int repeat, MeasureOne measure_one) {
  std::array<std::vector<Point>, 2> reps;
  for (int r = 0; r < repeat; ++r) {
    for (int sys = 0; sys < 2; ++sys) reps[static_cast<size_t>(sys)].push_back(measure_one(sys));
  }
  return {MedianPoint(reps[0]), MedianPoint(reps[1])};
}

std::string SelfDir() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

int Run(const Options& o) {
  std::string tmp = (fs::temp_directory_path() / fmt::format("hypic-bench-net-{}", ::getpid()));
  fs::create_directories(tmp);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmp};

  // hypicd: no model, RAM tier only, sized for every value of the run.
  std::string hypicd = o.hypicd.empty() ? SelfDir() + "/hypicd" : o.hypicd;
  std::string ready = tmp + "/ready";
  // hypicd runs one io thread per CPU it is given (its default: one per core of the machine).
  std::vector<std::string> daemon_args = {
      hypicd,        "--model",        "none", "--data-dir",   tmp + "/data", "--listen",
      "127.0.0.1:0", "--metrics",      "off",  "--ready-file", ready,         "--ram-capacity",
      "2GiB",        "--ssd-capacity", "0",    "--log-level",  "warn"};
  if (!o.server_cpus.empty()) {
    daemon_args.push_back("--io-threads");
    daemon_args.push_back(std::to_string(o.server_cpus.size()));
  }
  auto daemon = Child::Spawn(daemon_args, tmp + "/hypicd.log", o.server_cpus);
  if (!daemon.ok()) {
    fmt::print(stderr, "net: {}\n", daemon.status().ToString());
    return kExitUnavailable;
  }
  Endpoint redis_at{FreePort(), o.unix_sockets ? tmp + "/redis.sock" : ""};
  std::vector<std::string> redis_args = {o.redis,
                                         "--port",
                                         std::to_string(redis_at.port),
                                         "--bind",
                                         "127.0.0.1",
                                         "--save",
                                         "",
                                         "--appendonly",
                                         "no",
                                         "--protected-mode",
                                         "no",
                                         "--daemonize",
                                         "no",
                                         "--client-output-buffer-limit",
                                         "normal 0 0 0",
                                         "--dir",
                                         tmp};
  if (o.unix_sockets) {
    redis_args.insert(redis_args.end(), {"--unixsocket", redis_at.path, "--unixsocketperm", "700"});
  }
  auto redis = Child::Spawn(redis_args, tmp + "/redis.log", o.server_cpus);
  if (!redis.ok()) {
    fmt::print(stderr, "net: {}\n", redis.status().ToString());
    return kExitUnavailable;
  }
  uint16_t port = 0;
  std::string unix_path;
  for (int i = 0; i < 3000 && port == 0; ++i) {
    std::ifstream f(ready);
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("tcp=", 0) == 0)
        port = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
      if (line.rfind("unix=", 0) == 0) unix_path = line.substr(5);
    }
    if (port == 0) std::this_thread::sleep_for(10ms);
    if ((*daemon)->Exited()) break;
  }
  const Endpoint hypicd_at{port, o.unix_sockets ? unix_path : ""};
  if (port == 0 || (o.unix_sockets && unix_path.empty())) {
    fmt::print(stderr, "net: hypicd did not start (log in {}/hypicd.log)\n", tmp);
    return kExitUnavailable;
  }
  std::optional<Resp> admin_redis;
  for (int i = 0; i < 500 && !admin_redis; ++i) {
    auto r = Resp::Connect(redis_at);
    if (r.ok()) {
      admin_redis.emplace(std::move(r).value());
    } else {
      std::this_thread::sleep_for(10ms);
    }
  }
  if (!admin_redis) {
    fmt::print(stderr, "net: redis-server did not start\n");
    return kExitUnavailable;
  }
  client::ClientOptions copts;
  copts.address = fmt::format("127.0.0.1:{}", port);
  auto admin = client::Client::Connect(copts);
  if (!admin.ok()) {
    fmt::print(stderr, "net: {}\n", admin.status().ToString());
    return kExitUnavailable;
  }

  std::vector<Point> points;
  for (int mib : o.sizes_mib) {
    storage::SyntheticSpec spec;
    spec.seed = static_cast<uint64_t>(mib);
    spec.target_bytes = uint64_t(mib) << 20;
    auto entry = storage::MakeSyntheticEntry(spec);
    if (!entry.ok()) return kExitFailure;
    auto bytes = storage::Serialize(**entry);
    if (!bytes.ok()) return kExitFailure;
    Hash128 key = (*entry)->key().hash();
    if (Status st = (*admin)->Put(key, (*bytes)->span()); !st.ok()) {
      fmt::print(stderr, "net: PUT: {}\n", st.ToString());
      return kExitFailure;
    }
    std::string rkey = key.ToHex();
    std::string_view value(reinterpret_cast<const char*>((*bytes)->data()), (*bytes)->size());
    if (!admin_redis->Command({"SET", rkey, value}).ok() ||
        !admin_redis->Reply(nullptr, nullptr).ok()) {
      fmt::print(stderr, "net: redis SET failed\n");
      return kExitFailure;
    }
    const uint64_t size = (*bytes)->size();
    for (int conns : o.conns) {
      auto pair = MeasurePair(o.repeat, [&](int sys) {
        if (sys == 0) {
          return Measure(
              "hypicd", "GET", mib, conns, o.seconds, o.client_cpus, **daemon,
              [&]() -> std::function<int64_t()> {
                auto c = Lean::Connect(hypicd_at);
                if (!c.ok()) return {};
                auto shared = std::make_shared<Lean>(std::move(c).value());
                return [shared, key, size]() -> int64_t {
                  Status st = shared->Call(protocol::Opcode::kGet, key);
                  return st.ok() && shared->body().size() == size ? static_cast<int64_t>(size) : -1;
                };
              });
        }
        return Measure("redis", "GET", mib, conns, o.seconds, o.client_cpus, **redis,
                       [&]() -> std::function<int64_t()> {
                         auto c = Resp::Connect(redis_at);
                         if (!c.ok()) return {};
                         auto shared = std::make_shared<Resp>(std::move(c).value());
                         auto buf = std::make_shared<std::vector<char>>();
                         return [shared, buf, rkey, size]() -> int64_t {
                           if (!shared->Command({"GET", rkey}).ok()) return -1;
                           if (!shared->Reply(buf.get(), nullptr).ok()) return -1;
                           return buf->size() == size ? static_cast<int64_t>(size) : -1;
                         };
                       });
      });
      for (const Point& p : pair) {
        if (!o.json) {
          fmt::print(
              "GET {:>2} MiB  conns {:>2}  {:<7} {:>7.2f} GB/s {:>8.0f} ops/s  p50 {:>8.2f} ms  "
              "p99 {:>8.2f} ms  cpu/op server {:>6.0f} us client {:>6.0f} us{}\n",
              mib, conns, p.system, p.gb_per_s, p.ops_per_s, p.p50_ms, p.p99_ms, p.server_cpu_us,
              p.client_cpu_us, p.errors ? fmt::format("  ({} errors)", p.errors) : "");
        }
        points.push_back(p);
      }
    }
  }

  // HAS probes: batches of `has_batch` keys, half of them stored.
  std::vector<Hash128> keys;
  std::vector<std::string> rkeys;
  for (int i = 0; i < o.has_batch; ++i) {
    Hash128 k{static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull + 1, static_cast<uint64_t>(i)};
    keys.push_back(k);
    rkeys.push_back(k.ToHex());
  }
  {
    // Store the even keys in both systems: small synthetic entries for hypicd.
    for (int i = 0; i < o.has_batch; i += 2) {
      storage::SyntheticSpec spec;
      spec.seed = 1000 + static_cast<uint64_t>(i);
      spec.target_bytes = 4096;
      auto e = storage::MakeSyntheticEntry(spec);
      if (!e.ok()) return kExitFailure;
      auto b = storage::Serialize(**e);
      if (!b.ok()) return kExitFailure;
      keys[static_cast<size_t>(i)] = (*e)->key().hash();
      rkeys[static_cast<size_t>(i)] = keys[static_cast<size_t>(i)].ToHex();
      if (!(*admin)->Put(keys[static_cast<size_t>(i)], (*b)->span()).ok()) return kExitFailure;
      if (!admin_redis->Command({"SET", rkeys[static_cast<size_t>(i)], "x"}).ok() ||
          !admin_redis->Reply(nullptr, nullptr).ok()) {
        return kExitFailure;
      }
    }
  }
  const int64_t batch = o.has_batch;
  protocol::HasRequest has;
  has.keys = keys;
  auto request = std::make_shared<protocol::Bytes>(protocol::Encode(has));
  for (int conns : {1, 8}) {
    auto pair = MeasurePair(o.repeat, [&](int sys) {
      if (sys == 0) {
        return Measure("hypicd", "HAS", 0, conns, o.seconds, o.client_cpus, **daemon,
                       [&]() -> std::function<int64_t()> {
                         auto c = Lean::Connect(hypicd_at);
                         if (!c.ok()) return {};
                         auto shared = std::make_shared<Lean>(std::move(c).value());
                         return [shared, request, batch]() -> int64_t {
                           if (!shared->Call(protocol::Opcode::kHas, {}, *request).ok()) return -1;
                           auto r = protocol::Decode<protocol::HasReply>(shared->body());
                           if (!r.ok() || static_cast<int64_t>(r->tiers.size()) != batch) return -1;
                           int64_t hits = 0;
                           for (auto t : r->tiers) hits += t != protocol::Tier::kNone;
                           return hits == batch / 2 ? batch : -1;
                         };
                       });
      }
      return Measure("redis", "HAS", 0, conns, o.seconds, o.client_cpus, **redis,
                     [&]() -> std::function<int64_t()> {
                       auto c = Resp::Connect(redis_at);
                       if (!c.ok()) return {};
                       auto shared = std::make_shared<Resp>(std::move(c).value());
                       std::vector<std::string_view> cmd = {"EXISTS"};
                       for (const auto& k : rkeys) cmd.push_back(k);
                       return [shared, cmd, batch]() -> int64_t {
                         std::string line;
                         if (!shared->Command(cmd).ok() || !shared->Reply(nullptr, &line).ok()) {
                           return -1;
                         }
                         return line == ":" + std::to_string(batch / 2) ? batch : -1;
                       };
                     });
    });
    for (Point& p : pair) {
      // For HAS, "bytes" counted keys: report probes (keys) per second.
      p.ops_per_s *= static_cast<double>(batch);
      p.gb_per_s = 0;
      if (!o.json) {
        fmt::print(
            "HAS x{}      conns {:>2}  {:<7} {:>10.0f} keys/s  p50 {:>8.3f} ms  p99 {:>8.3f} "
            "ms  cpu/op server {:>6.1f} us client {:>6.1f} us{}\n",
            batch, conns, p.system, p.ops_per_s, p.p50_ms, p.p99_ms, p.server_cpu_us,
            p.client_cpu_us, p.errors ? fmt::format("  ({} errors)", p.errors) : "");
      }
      points.push_back(p);
    }
  }

  // Ratios hypicd / redis per point (GET: throughput; both: p99).
  bool target_met = true;
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i + 1 < points.size(); i += 2) {
    const Point& h = points[i];
    const Point& r = points[i + 1];
    double ratio = r.ops_per_s > 0 ? h.ops_per_s / r.ops_per_s : 0;
    bool met = ratio >= 1.5 && h.p99_ms < r.p99_ms;
    if (h.op == "GET") target_met = target_met && met;
    if (!o.json) {
      fmt::print(
          "{} {} MiB conns {:>2}: hypicd/redis throughput {:.2f}x, p99 {:.2f} vs {:.2f} ms{}\n",
          h.op, h.size_mib, h.conns, ratio, h.p99_ms, r.p99_ms,
          h.op == "GET" ? (met ? "  [target met]" : "  [target missed]") : "");
    }
    for (const Point* p : {&h, &r}) {
      out.push_back({{"system", p->system},
                     {"op", p->op},
                     {"size_mib", p->size_mib},
                     {"conns", p->conns},
                     {"ops_per_s", p->ops_per_s},
                     {"gb_per_s", p->gb_per_s},
                     {"p50_ms", p->p50_ms},
                     {"p99_ms", p->p99_ms},
                     {"server_cpu_us_per_op", p->server_cpu_us},
                     {"client_cpu_us_per_op", p->client_cpu_us},
                     {"errors", p->errors}});
    }
  }
  if (o.json) fmt::print("{}\n", out.dump(2));
  (*daemon)->Stop();
  (*redis)->Stop();
  return target_met ? kExitOk : kExitFailure;
}

const bool kRegistered = RegisterSubcommand(
    "net", "GET/HAS over loopback: hypicd against a private redis-server, side by side",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<Options>();
      sub.add_option("--sizes", o->sizes_mib, "value sizes in MiB")->delimiter(',');
      sub.add_option("--conns", o->conns, "connection counts")->delimiter(',');
      sub.add_option("--seconds", o->seconds, "seconds per point");
      sub.add_option("--has-batch", o->has_batch, "keys per HAS / EXISTS");
      sub.add_option("--hypicd", o->hypicd, "hypicd binary (default: beside hypic-bench)");
      sub.add_option("--redis-server", o->redis, "redis-server binary");
      sub.add_flag("--json", o->json, "print the points as JSON");
      sub.add_option("--repeat", o->repeat,
                     "measurements per point and system, alternating; medians are reported")
          ->check(CLI::Range(1, 99));
      sub.add_option("--server-cpus", o->server_cpus,
                     "CPUs both servers are pinned to (hypicd gets one io thread per CPU)")
          ->delimiter(',');
      sub.add_option("--client-cpus", o->client_cpus, "CPUs the client threads are pinned to")
          ->delimiter(',');
      sub.add_flag("--unix", o->unix_sockets,
                   "drive both servers over unix sockets (the same-host sidecar's other "
                   "transport) instead of loopback TCP");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace hypic::tools::bench_net
