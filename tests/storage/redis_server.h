// Test support: a private redis-server on a free loopback port (no persistence), started and
// killed by the test, plus a hiredis connection for poking at what it stores; and RedisCluster,
// three such servers made into a Redis Cluster with redis-cli, with a hand-driven slot
// migration. Found on PATH; when they are missing, Available() is false and the tests skip with
// a message. Header-only so that the storage and e2e tests share it. Not thread-safe.
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
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
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

  // `extra`: more redis-server flags, e.g. {"--maxmemory", "4mb"}. A `password` is required of
  // clients (and of cluster peers), and the helper connection AUTHs with it.
  // `port` 0: a free one.
  explicit RedisServer(std::vector<std::string> extra = {}, std::string password = "",
                       uint16_t port = 0)
      : extra_(std::move(extra)), password_(std::move(password)) {
    port_ = port != 0 ? port : FreePort();
    if (!password_.empty()) {
      extra_.insert(extra_.end(), {"--requirepass", password_, "--masterauth", password_});
    }
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

  bool running() const { return pid_ > 0; }

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
      if (!password_.empty()) {
        auto* auth = static_cast<redisReply*>(redisCommand(ctx_, "AUTH %s", password_.c_str()));
        const bool ok = auth != nullptr && auth->type == REDIS_REPLY_STATUS;
        freeReplyObject(auth);
        if (!ok) {
          redisFree(ctx_);
          ctx_ = nullptr;
          return nullptr;
        }
      }
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
  // A loopback port that was free a moment ago (`want` 0: any, as the kernel picks).
  static uint16_t FreePort(uint16_t want = 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(want);
    socklen_t len = sizeof a;
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return bound ? ntohs(a.sin_port) : 0;
  }

 public:
  // A free port for a cluster node: its bus port (port + 10000) must exist and be free too.
  static uint16_t FreeClusterPort() {
    for (;;) {
      const uint16_t p = FreePort();
      if (p != 0 && p < 55536 && FreePort(static_cast<uint16_t>(p + 10000)) != 0) return p;
    }
  }

 private:
  std::vector<std::string> extra_;
  std::string password_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  redisContext* ctx_ = nullptr;
};

// A 3-master Redis Cluster (no replicas) on loopback ports, its nodes.conf files in a private
// temporary folder. Start() creates it with `redis-cli --cluster create` and polls until every
// node reports cluster_state:ok.
class RedisCluster {
 public:
  static constexpr int kNodes = 3;

  static bool Available() {
    return RedisServer::Available() && std::system("command -v redis-cli >/dev/null 2>&1") == 0;
  }

  // `extra`: more redis-server flags for every node.
  explicit RedisCluster(std::string password = "", std::vector<std::string> extra = {})
      : password_(std::move(password)) {
    char tmpl[] = "/tmp/hypic-redis-cluster-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) dir_ = tmpl;
    for (int i = 0; i < kNodes; ++i) {
      std::vector<std::string> args = {"--cluster-enabled",
                                       "yes",
                                       "--dir",
                                       dir_,
                                       "--cluster-config-file",
                                       "nodes-" + std::to_string(i) + ".conf"};
      args.insert(args.end(), extra.begin(), extra.end());
      nodes_.push_back(std::make_unique<RedisServer>(std::move(args), password_,
                                                     RedisServer::FreeClusterPort()));
    }
  }
  ~RedisCluster() {
    nodes_.clear();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts the nodes, joins them and waits (20 s at most) until the cluster is ok on each.
  bool Start() {
    if (dir_.empty()) return false;
    std::vector<std::string> args = {"redis-cli"};
    if (!password_.empty()) args.insert(args.end(), {"-a", password_, "--no-auth-warning"});
    args.insert(args.end(), {"--cluster", "create"});
    for (auto& n : nodes_) {
      if (!n->Start()) return false;
      args.push_back("127.0.0.1:" + std::to_string(n->port()));
    }
    args.emplace_back("--cluster-yes");
    const std::string log = dir_ + "/redis-cli.log";
    if (Run(args, log) != 0) {
      std::fprintf(stderr, "redis-cli --cluster create failed:\n");
      std::system(("cat " + log + " >&2").c_str());
      return false;
    }
    return WaitUntilOk();
  }

  // Polls (20 s at most) until every running node says cluster_state:ok.
  bool WaitUntilOk() {
    for (int i = 0; i < 2000; ++i) {
      bool ok = true;
      for (auto& n : nodes_) {
        if (!n->running()) continue;
        auto r = n->Command({"CLUSTER", "INFO"});
        ok = ok && r != nullptr && r->type == REDIS_REPLY_STRING &&
             std::string_view(r->str, r->len).find("cluster_state:ok") != std::string_view::npos;
      }
      if (ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  RedisServer& node(int i) { return *nodes_[i]; }

  // redis-cluster://[:password@]127.0.0.1:port, seeded by the first `seeds` nodes.
  std::string Url(int seeds = 1) const {
    std::string url = "redis-cluster://" + (password_.empty() ? "" : ":" + password_ + "@");
    for (int i = 0; i < seeds; ++i) {
      url += (i == 0 ? "" : ",") + std::string("127.0.0.1:") + std::to_string(nodes_[i]->port());
    }
    return url;
  }

  // The node that serves `key` (the one that answers a command on it without a redirection).
  int Owner(const std::string& key) {
    for (int i = 0; i < kNodes; ++i) {
      auto r = nodes_[i]->Command({"EXISTS", key});
      if (r != nullptr && r->type == REDIS_REPLY_INTEGER) return i;
    }
    return -1;
  }

  std::string Id(int i) {
    auto r = nodes_[i]->Command({"CLUSTER", "MYID"});
    return r != nullptr && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "";
  }

  // Slot migration by hand, in the three steps redis-cli --cluster reshard takes.
  bool BeginMigration(uint16_t slot, int from, int to) {
    const std::string s = std::to_string(slot);
    return Ok(nodes_[to]->Command({"CLUSTER", "SETSLOT", s, "IMPORTING", Id(from)})) &&
           Ok(nodes_[from]->Command({"CLUSTER", "SETSLOT", s, "MIGRATING", Id(to)}));
  }
  // Moves the slot's keys one at a time, calling between(k) after the k-th; false on an error.
  bool MoveKeys(uint16_t slot, int from, int to, const std::function<void(int)>& between) {
    for (int k = 1;; ++k) {
      auto keys = nodes_[from]->Command({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "1"});
      if (keys == nullptr || keys->type != REDIS_REPLY_ARRAY) return false;
      if (keys->elements == 0) return true;
      std::vector<std::string> migrate = {
          "MIGRATE", "127.0.0.1", std::to_string(nodes_[to]->port()), "", "0", "5000"};
      if (!password_.empty()) migrate.insert(migrate.end(), {"AUTH", password_});
      migrate.insert(migrate.end(),
                     {"KEYS", std::string(keys->element[0]->str, keys->element[0]->len)});
      if (!Ok(nodes_[from]->Command(migrate))) return false;
      between(k);
    }
  }
  // Gives the slot to `to` on every node (the target first, as redis-cli does).
  bool EndMigration(uint16_t slot, int from, int to) {
    const std::string s = std::to_string(slot), id = Id(to);
    bool ok = Ok(nodes_[to]->Command({"CLUSTER", "SETSLOT", s, "NODE", id})) &&
              Ok(nodes_[from]->Command({"CLUSTER", "SETSLOT", s, "NODE", id}));
    for (int i = 0; i < kNodes; ++i) {
      if (i != to && i != from)
        ok = ok && Ok(nodes_[i]->Command({"CLUSTER", "SETSLOT", s, "NODE", id}));
    }
    return ok;
  }

 private:
  static bool Ok(const RedisServer::Reply& r) {
    return r != nullptr && r->type != REDIS_REPLY_ERROR;
  }
  static int Run(std::vector<std::string> args, const std::string& log) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string password_;
  std::string dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace hypic::testing
