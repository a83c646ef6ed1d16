// Test support: a private redis-server on a free loopback port (no persistence), started and
// killed by the test, plus a hiredis connection for poking at what it stores. Found on PATH;
// when it is missing, Available() is false and the tests skip with a message. Header-only so
// that the storage and e2e tests share it. Not thread-safe.
#pragma once

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace hypic::testing {

class RedisServer {
 public:
  struct ReplyDeleter {
    void operator()(redisReply* r) const { freeReplyObject(r); }
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

  static bool Available() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }

  // `extra`: more redis-server flags, e.g. {"--maxmemory", "4mb"}.
  explicit RedisServer(std::vector<std::string> extra = {}) : extra_(std::move(extra)) {
    port_ = FreePort();
  }
  ~RedisServer() {
    Stop();
    if (ctx_ != nullptr) redisFree(ctx_);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts (or restarts) the server on the same port; true once it answers PING (5 s at most).
  bool Start() {
    std::vector<std::string> args = {
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
        "--save",       "",       "--appendonly",        "no"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid_, "redis-server", &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    if (pid_ < 0) return false;
    for (int i = 0; i < 500; ++i) {
      Reply r = Command({"PING"});
      if (r != nullptr && r->type == REDIS_REPLY_STATUS) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // SIGKILL: Redis vanishes mid-conversation, as in a crash.
  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
  }

  // SIGSTOP / SIGCONT: a server that is up but does not answer (slow, or hung).
  void Pause() { ::kill(pid_, SIGSTOP); }
  void Resume() { ::kill(pid_, SIGCONT); }

  uint16_t port() const { return port_; }
  std::string Url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // One command on the helper's own connection; null when the server does not answer.
  Reply Command(const std::vector<std::string>& args) {
    if (ctx_ == nullptr) {
      timeval tv{1, 0};
      ctx_ = redisConnectWithTimeout("127.0.0.1", port_, tv);
      if (ctx_ == nullptr) return nullptr;
      if (ctx_->err) {
        redisFree(ctx_);
        ctx_ = nullptr;
        return nullptr;
      }
      redisSetTimeout(ctx_, tv);
    }
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) {
      redisFree(ctx_);
      ctx_ = nullptr;
    }
    return Reply(r);
  }

  // The keys that match `pattern`.
  std::vector<std::string> Keys(const std::string& pattern) {
    std::vector<std::string> out;
    Reply r = Command({"KEYS", pattern});
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;
    for (size_t i = 0; i < r->elements; ++i)
      out.emplace_back(r->element[i]->str, r->element[i]->len);
    return out;
  }

 private:
  static uint16_t FreePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }

  std::vector<std::string> extra_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  redisContext* ctx_ = nullptr;
};

}  // namespace hypic::testing
