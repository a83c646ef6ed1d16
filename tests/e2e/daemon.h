// Test support for end-to-end tests against the real hypicd binary:
//   Daemon  starts $HYPIC_BIN_DIR/hypicd in a fresh temporary data dir on ephemeral ports
//           (TCP, metrics) plus its unix socket, waits for its ready file, and stops it with a
//           signal, returning the exit code; its log is kept for failure messages.
//   RawConn a blocking client socket that speaks frames through protocol/ only, so tests can
//           send exactly the bytes they want (malformed ones included) and read what comes back.
// Not thread-safe; one RawConn per thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "protocol/decoder.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace hypic::e2e {

using namespace std::chrono_literals;

// A [[tenant]] table for a daemon's config_toml: the tenant of connections without a token,
// with the whole store (namespace "") and the `write` permission, for tests that PUT and DEL.
inline constexpr char kLocalWriterTenant[] =
    "[[tenant]]\nname = \"local\"\nops = [\"read\", \"compute\", \"write\"]\n";

struct DaemonOptions {
  std::vector<std::string> args;           // extra flags
  std::map<std::string, std::string> env;  // extra environment (HYPIC_*)
  bool metrics = true;                     // serve /metrics on an ephemeral port
  // Written to a file in the data dir and passed as --config (tenants are TOML-only).
  std::string config_toml;
  // Start on this existing data dir (a restart) instead of a fresh temporary one; the Daemon
  // then leaves it in place, and the caller removes it.
  std::string data_dir;
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(const DaemonOptions& options = {});
  ~Daemon();  // SIGKILL if still running; removes the data dir it made

  uint16_t port() const { return port_; }
  uint16_t metrics_port() const { return metrics_port_; }
  const std::string& unix_path() const { return unix_path_; }
  const std::string& data_dir() const { return data_dir_; }
  pid_t pid() const { return pid_; }

  bool Alive();
  // Sends `signo` and waits up to `timeout` for the exit; returns the exit code, or -1 when
  // it did not exit (then it is killed) or died from a signal.
  int Stop(int signo, std::chrono::milliseconds timeout = 15s);
  // Waits for an exit that something else caused (e.g. an admin SHUTDOWN).
  int WaitExit(std::chrono::milliseconds timeout);
  // The daemon's stderr so far.
  std::string Log() const;
  // Resident set size in KiB, from /proc.
  uint64_t RssKiB() const;

 private:
  Daemon() = default;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  uint16_t port_ = 0;
  uint16_t metrics_port_ = 0;
  std::string unix_path_;
  std::string data_dir_;
  bool own_dir_ = true;  // made by Start: removed with the Daemon
};

// Runs hypicd with `args` to completion (for startup-error tests); returns exit code and stderr.
struct RunResult {
  int exit_code = -1;
  std::string output;
};
RunResult RunDaemonToExit(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env = {},
                          std::chrono::milliseconds timeout = 10s);

struct ReplyFrame {
  protocol::FrameHeader header;
  protocol::Bytes ext;
  protocol::Bytes body;
  StatusCode status() const { return static_cast<StatusCode>(header.status); }
  std::string text() const {
    return std::string(reinterpret_cast<const char*>(body.data()), body.size());
  }
};

class RawConn {
 public:
  static Result<RawConn> Tcp(uint16_t port);
  // Tcp, then a HELLO without tokens that must succeed.
  static Result<RawConn> TcpHello(uint16_t port);
  static Result<RawConn> Unix(const std::string& path);
  // Unix, then a HELLO without tokens that must succeed: this process runs as the daemon's
  // user, so the connection holds the admin grant when no admin token is configured.
  static Result<RawConn> UnixHello(const std::string& path);
  RawConn(RawConn&& other) noexcept;
  RawConn& operator=(RawConn&& other) noexcept;
  ~RawConn();

  int fd() const { return fd_; }
  Status Send(protocol::ByteSpan bytes);
  Status SendFrame(const protocol::FrameHeader& h, protocol::ByteSpan ext = {},
                   protocol::ByteSpan body = {});
  // Reads one reply frame; kDeadlineExceeded on timeout, kIoError on EOF/reset.
  Result<ReplyFrame> Read(std::chrono::milliseconds timeout = 5s);
  // Reads until the peer closes; true when it did within `timeout` (frames are discarded).
  bool WaitClosed(std::chrono::milliseconds timeout);

  // Request helpers: a frame with the next request id, then its reply.
  Result<ReplyFrame> Call(protocol::Opcode op, protocol::ByteSpan body = {},
                          protocol::ByteSpan ext = {}, Hash128 key = {},
                          std::chrono::milliseconds timeout = 10s);
  Result<protocol::HelloReply> Hello(const std::string& token = "",
                                     const std::string& admin_token = "",
                                     uint64_t features = protocol::kFeatureXxh3);
  uint64_t next_id() { return ++request_id_; }

 private:
  explicit RawConn(int fd);
  int fd_ = -1;
  uint64_t request_id_ = 0;
  protocol::Decoder decoder_;
  std::vector<std::byte> buf_;
};

// Where Daemon::Start's daemons generate and find the built-in models (shared by the tests of
// one build tree), so a test can load the daemon's model in-process.
std::string ModelCacheDir();
// The path of a built binary (hypicctl, hypic-op) beside hypicd.
std::string BinPath(const std::string& name);

// A GET of `path` from 127.0.0.1:`port` (HTTP/1.0, with `header` lines such as
// "Authorization: Bearer x\r\n"); the whole response, or "" when it cannot connect.
std::string HttpGet(uint16_t port, const std::string& path, const std::string& header = "");

// Bytes of a string, for bodies.
protocol::Bytes AsBytes(std::string_view s);

// A COMPOSE prompt of `segments` segments of `tokens` random tokens each (below `vocab`, the
// builtin:tiny model's by default), then a 5-token raw question, all from `seed`.
std::vector<protocol::ComposePart> SegmentsPrompt(uint64_t seed, size_t segments, size_t tokens,
                                                  uint32_t vocab = 256);

}  // namespace hypic::e2e
