#include "tests/e2e/daemon.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/seeded_rng.h"

extern char** environ;

namespace hypic::e2e {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string BinDir() {
  const char* dir = std::getenv("HYPIC_BIN_DIR");
  return dir != nullptr ? dir : "bin";
}

std::string MakeTempDir() {
  std::string tmpl = (fs::temp_directory_path() / "hypicd-e2e-XXXXXX").string();
  char* made = ::mkdtemp(tmpl.data());
  return made != nullptr ? std::string(made) : std::string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Spawns hypicd with stdout+stderr into `log_path`. Returns the pid or -1.
pid_t Spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
            const std::string& log_path) {
  std::vector<std::string> argv_s;
  argv_s.push_back(BinDir() + "/hypicd");
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  // The test's own HYPIC_* variables (set by ctest) must not leak into the daemon's config.
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "HYPIC_", 6) != 0) env_s.emplace_back(*e);
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Waits for `pid` up to `timeout`. Returns true and sets *code when it exited.
bool WaitPid(pid_t pid, std::chrono::milliseconds timeout, int* code) {
  auto end = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return true;
    }
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
}

}  // namespace

std::string HttpGet(uint16_t port, const std::string& path, const std::string& header) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n" + header + "\r\n";
  (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

std::string ModelCacheDir() { return BinDir() + "/../e2e-models"; }
std::string BinPath(const std::string& name) { return BinDir() + "/" + name; }

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options) {
  std::unique_ptr<Daemon> d(new Daemon());
  d->own_dir_ = options.data_dir.empty();
  d->data_dir_ = d->own_dir_ ? MakeTempDir() : options.data_dir;
  if (d->data_dir_.empty()) return IoError("mkdtemp failed");
  std::string ready = d->data_dir_ + "/ready";
  std::error_code stale;
  fs::remove(ready, stale);  // a restart's dir has the ready file of the run before
  std::vector<std::string> args = {
      "--data-dir",     d->data_dir_, "--listen",       "127.0.0.1:0",
      "--ready-file",   ready,        "--metrics",      options.metrics ? "127.0.0.1:0" : "off",
      "--ram-capacity", "256MiB",     "--ssd-capacity", "256MiB"};
  // The tiny built-in model, generated once per build tree and shared by every test.
  for (std::string a : {"--model", "builtin:tiny", "--model-cache-dir"}) args.push_back(a);
  args.push_back(ModelCacheDir());
  if (!options.config_toml.empty()) {
    const std::string config = d->data_dir_ + "/hypicd.toml";
    std::ofstream(config) << options.config_toml;
    args.insert(args.end(), {"--config", config});
  }
  args.insert(args.end(), options.args.begin(), options.args.end());
  d->pid_ = Spawn(args, options.env, d->data_dir_ + "/hypicd.log");
  if (d->pid_ < 0) return IoError("cannot spawn " + BinDir() + "/hypicd");

  auto end = Clock::now() + 60s;  // a first start may build the builtin model
  while (!fs::exists(ready)) {
    int code = 0;
    if (WaitPid(d->pid_, 0ms, &code)) {
      d->exited_ = true;
      d->exit_code_ = code;
      return IoError("hypicd exited with " + std::to_string(code) + " before ready:\n" + d->Log());
    }
    if (Clock::now() > end) return DeadlineExceeded("hypicd not ready in time:\n" + d->Log());
    std::this_thread::sleep_for(10ms);
  }
  std::istringstream lines(ReadFile(ready));
  for (std::string line; std::getline(lines, line);) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "tcp") d->port_ = static_cast<uint16_t>(std::stoi(v.substr(v.rfind(':') + 1)));
    if (k == "metrics") {
      d->metrics_port_ = static_cast<uint16_t>(std::stoi(v.substr(v.rfind(':') + 1)));
    }
    if (k == "unix") d->unix_path_ = v;
  }
  if (d->port_ == 0) return Internal("ready file without a tcp port");
  return d;
}

Daemon::~Daemon() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    int code = 0;
    WaitPid(pid_, 5s, &code);
  }
  if (own_dir_ && !data_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(data_dir_, ec);
  }
}

bool Daemon::Alive() {
  if (exited_) return false;
  int code = 0;
  if (WaitPid(pid_, 0ms, &code)) {
    exited_ = true;
    exit_code_ = code;
    return false;
  }
  return true;
}

int Daemon::Stop(int signo, std::chrono::milliseconds timeout) {
  if (!Alive()) return exit_code_;
  ::kill(pid_, signo);
  return WaitExit(timeout);
}

int Daemon::WaitExit(std::chrono::milliseconds timeout) {
  if (exited_) return exit_code_;
  int code = 0;
  if (WaitPid(pid_, timeout, &code)) {
    exited_ = true;
    exit_code_ = code;
    return code;
  }
  ::kill(pid_, SIGKILL);
  WaitPid(pid_, 5s, &code);
  exited_ = true;
  exit_code_ = -1;
  return -1;
}

std::string Daemon::Log() const { return ReadFile(data_dir_ + "/hypicd.log"); }

uint64_t Daemon::RssKiB() const {
  std::istringstream status(ReadFile("/proc/" + std::to_string(pid_) + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

RunResult RunDaemonToExit(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds timeout) {
  RunResult r;
  std::string dir = MakeTempDir();
  std::string log = dir + "/out.log";
  pid_t pid = Spawn(args, env, log);
  if (pid < 0) return r;
  int code = -1;
  if (!WaitPid(pid, timeout, &code)) {
    ::kill(pid, SIGKILL);
    WaitPid(pid, 5s, &code);
    code = -1;
  }
  r.exit_code = code;
  r.output = ReadFile(log);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

protocol::Bytes AsBytes(std::string_view s) {
  protocol::Bytes out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

namespace {
protocol::DecodeLimits ClientLimits() {
  protocol::DecodeLimits l;
  l.max_body = uint64_t{1} << 32;
  return l;
}
}  // namespace

RawConn::RawConn(int fd) : fd_(fd), decoder_(protocol::Decoder::Role::kClient, ClientLimits()) {}

RawConn::RawConn(RawConn&& other) noexcept
    : fd_(other.fd_),
      request_id_(other.request_id_),
      decoder_(other.decoder_),
      buf_(std::move(other.buf_)) {
  other.fd_ = -1;
}

RawConn& RawConn::operator=(RawConn&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    request_id_ = other.request_id_;
    decoder_ = other.decoder_;
    buf_ = std::move(other.buf_);
    other.fd_ = -1;
  }
  return *this;
}

RawConn::~RawConn() {
  if (fd_ >= 0) ::close(fd_);
}

Result<RawConn> RawConn::Tcp(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    return IoError(std::string("connect: ") + std::strerror(err));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return RawConn(fd);
}

Result<RawConn> RawConn::TcpHello(uint16_t port) {
  HYPIC_ASSIGN_OR_RETURN(RawConn c, Tcp(port));
  HYPIC_RETURN_IF_ERROR(c.Hello().status());
  return c;
}

Result<RawConn> RawConn::Unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    return IoError(std::string("connect unix: ") + std::strerror(err));
  }
  return RawConn(fd);
}

Result<RawConn> RawConn::UnixHello(const std::string& path) {
  HYPIC_ASSIGN_OR_RETURN(RawConn c, Unix(path));
  HYPIC_RETURN_IF_ERROR(c.Hello().status());
  return c;
}

Status RawConn::Send(protocol::ByteSpan bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(std::string("send: ") + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status RawConn::SendFrame(const protocol::FrameHeader& h, protocol::ByteSpan ext,
                          protocol::ByteSpan body) {
  HYPIC_ASSIGN_OR_RETURN(auto header, protocol::MakeHeader(h, ext, body));
  HYPIC_RETURN_IF_ERROR(Send(header));
  if (!ext.empty()) HYPIC_RETURN_IF_ERROR(Send(ext));
  if (!body.empty()) HYPIC_RETURN_IF_ERROR(Send(body));
  return Status::Ok();
}

Result<ReplyFrame> RawConn::Read(std::chrono::milliseconds timeout) {
  auto end = Clock::now() + timeout;
  for (;;) {
    protocol::Frame frame;
    size_t consumed = 0;
    auto st = decoder_.Decode(buf_, &consumed, &frame);
    if (st == protocol::DecodeStatus::kOk) {
      ReplyFrame r;
      r.header = frame.header;
      r.ext.assign(frame.ext.begin(), frame.ext.end());
      r.body.assign(frame.body.begin(), frame.body.end());
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(consumed));
      return r;
    }
    if (st != protocol::DecodeStatus::kNeedMore) {
      return BadRequest(std::string("bad reply frame: ") +
                        std::string(protocol::DecodeStatusName(st)));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) return DeadlineExceeded("no reply in time");
    pollfd p{fd_, POLLIN, 0};
    int pr = ::poll(&p, 1, static_cast<int>(left.count()));
    if (pr == 0) return DeadlineExceeded("no reply in time");
    if (pr < 0 && errno == EINTR) continue;
    size_t old = buf_.size();
    size_t want = std::max<size_t>(
        1 << 16, static_cast<size_t>(decoder_.needed()) - std::min<size_t>(old, decoder_.needed()));
    buf_.resize(old + want);
    ssize_t n = ::recv(fd_, buf_.data() + old, want, 0);
    if (n <= 0) {
      buf_.resize(old);
      return IoError(n == 0 ? "connection closed" : std::string("recv: ") + std::strerror(errno));
    }
    buf_.resize(old + static_cast<size_t>(n));
  }
}

bool RawConn::WaitClosed(std::chrono::milliseconds timeout) {
  auto end = Clock::now() + timeout;
  std::vector<std::byte> sink(1 << 16);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    int pr = ::poll(&p, 1, static_cast<int>(left.count()));
    if (pr == 0) return false;
    if (pr < 0) continue;
    ssize_t n = ::recv(fd_, sink.data(), sink.size(), 0);
    if (n <= 0) return true;
  }
}

Result<ReplyFrame> RawConn::Call(protocol::Opcode op, protocol::ByteSpan body,
                                 protocol::ByteSpan ext, Hash128 key,
                                 std::chrono::milliseconds timeout) {
  protocol::FrameHeader h;
  h.opcode = op;
  h.request_id = next_id();
  h.key = key;
  HYPIC_RETURN_IF_ERROR(SendFrame(h, ext, body));
  HYPIC_ASSIGN_OR_RETURN(ReplyFrame r, Read(timeout));
  if (r.header.request_id != h.request_id) {
    return Internal("reply for request " + std::to_string(r.header.request_id) + ", expected " +
                    std::to_string(h.request_id) + " (" +
                    std::string(protocol::OpcodeName(r.header.opcode)) + " status " +
                    std::to_string(r.header.status) + ": " + r.text() + ")");
  }
  return r;
}

Result<protocol::HelloReply> RawConn::Hello(const std::string& token,
                                            const std::string& admin_token, uint64_t features) {
  protocol::HelloRequest req;
  req.client_name = "e2e";
  req.token = token;
  req.admin_token = admin_token;
  req.features = features;
  auto body = protocol::Encode(req);
  HYPIC_ASSIGN_OR_RETURN(ReplyFrame r, Call(protocol::Opcode::kHello, body));
  if (r.status() != StatusCode::kOk) return Status(r.status(), r.text());
  return protocol::Decode<protocol::HelloReply>(r.body);
}

std::vector<protocol::ComposePart> SegmentsPrompt(uint64_t seed, size_t segments, size_t tokens,
                                                  uint32_t vocab) {
  testing::SeededRng rng(seed);
  std::vector<protocol::ComposePart> parts;
  for (size_t i = 0; i < segments; ++i) {
    protocol::ComposePart p;
    p.kind = protocol::PartKind::kSegmentTokens;
    p.tokens = rng.Tokens(tokens, vocab);
    parts.push_back(std::move(p));
  }
  protocol::ComposePart question;
  question.kind = protocol::PartKind::kRaw;
  question.tokens = rng.Tokens(5, vocab);
  parts.push_back(std::move(question));
  return parts;
}

}  // namespace hypic::e2e
