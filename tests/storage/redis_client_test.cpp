// RedisClient against a fake server on loopback that answers every command with bytes the test
// chooses: replies within the bounds are delivered whole; an array that declares more elements
// than max_reply_elements, strings that sum past max_reply_bytes, and a bulk string longer
// than max_reply_bytes still arriving are refused before hiredis allocates or buffers them (an
// I/O error naming the bound, the connection dropped, never a wrong or huge read); the next
// command after a refusal runs on a fresh connection.
#include "storage/redis_client.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/check_ok.h"

namespace hypic::storage {
namespace {

// A TCP server on 127.0.0.1 (an ephemeral port). Connection i answers every read of a command
// with replies[min(i, last)] and keeps the connection open until the client closes it.
class FakeRedis {
 public:
  explicit FakeRedis(std::vector<std::string> replies) : replies_(std::move(replies)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(listen_fd_, 8) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }

  ~FakeRedis() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& t : sessions_) t.join();
    ::close(listen_fd_);
  }

  FakeRedis(const FakeRedis&) = delete;
  FakeRedis& operator=(const FakeRedis&) = delete;

  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  static bool Readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 20) > 0;
  }

  void Accept() {
    while (!stop_) {
      if (!Readable(listen_fd_)) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      const int i = connections_++;
      const std::string& reply = replies_[std::min<size_t>(i, replies_.size() - 1)];
      sessions_.emplace_back([this, fd, &reply] { Serve(fd, reply); });
    }
  }

  // One reply per read of the client's bytes: every command the tests send fits one read.
  void Serve(int fd, const std::string& reply) {
    char buf[4096];
    while (!stop_) {
      if (!Readable(fd)) continue;
      if (::read(fd, buf, sizeof(buf)) <= 0) break;  // the client closed
      for (size_t off = 0; off < reply.size();) {
        const ssize_t n = ::send(fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;  // the client closed mid-reply (it refused the reply)
        off += static_cast<size_t>(n);
      }
    }
    ::close(fd);
  }

  const std::vector<std::string> replies_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::vector<std::thread> sessions_;  // touched by the acceptor only, until it is joined
};

RedisClientOptions OptionsFor(const FakeRedis& server) {
  RedisClientOptions o;
  o.address.nodes.push_back({"127.0.0.1", server.port()});
  o.command_timeout = std::chrono::milliseconds(5000);
  o.backoff_min = std::chrono::milliseconds(1);
  o.backoff_max = std::chrono::milliseconds(1);
  return o;
}

// One GET through the client: the reply's type and string, or the error.
struct Outcome {
  Status status;
  int type = 0;
  std::string text;
  size_t elements = 0;
};

Outcome RunGet(RedisClient& client) {
  Outcome out;
  out.status = client.Run(
      "k", 1,
      [](size_t) {
        return RedisArgs{"GET", "k"};
      },
      [&](size_t, const redisReply& r) {
        out.type = r.type;
        if (r.str != nullptr) out.text.assign(r.str, r.len);
        out.elements = r.elements;
      });
  return out;
}

bool Mentions(const Status& st, std::string_view what) {
  return st.message().find(what) != std::string::npos;
}

TEST_CASE("redis client: replies within the bounds are delivered whole") {
  FakeRedis server({"$5\r\nhello\r\n"});
  RedisClientOptions o = OptionsFor(server);
  o.max_reply_bytes = 11;  // exactly the reply's bytes on the wire, framing included
  RedisClient client(o);
  for (int i = 0; i < 3; ++i) {
    Outcome got = RunGet(client);
    CHECK_OK(got.status);
    CHECK(got.type == REDIS_REPLY_STRING);
    CHECK(got.text == "hello");
  }
  CHECK(server.connections() == 1);  // the connection is pooled and reused
  CHECK(client.Counters().io_errors == 0);
}

TEST_CASE("redis client: an array declaring more elements than the bound is refused") {
  // Two billion elements: hiredis 0.14 alone would allocate 16 GB for the pointers first.
  FakeRedis server({"*2000000000\r\n"});
  RedisClient client(OptionsFor(server));
  Outcome got = RunGet(client);
  CHECK(got.status.code() == StatusCode::kIoError);
  CHECK(Mentions(got.status, "array elements"));
  CHECK(got.type == 0);  // nothing delivered
  CHECK(client.Counters().io_errors == 1);
}

TEST_CASE("redis client: nested arrays count their elements together") {
  std::string nested = "*2\r\n*3\r\n:1\r\n:2\r\n:3\r\n*3\r\n:4\r\n:5\r\n:6\r\n";  // 8 elements
  FakeRedis server({nested});
  RedisClientOptions o = OptionsFor(server);
  SUBCASE("within the bound") {
    o.max_reply_elements = 8;
    RedisClient client(o);
    Outcome got = RunGet(client);
    CHECK_OK(got.status);
    CHECK(got.type == REDIS_REPLY_ARRAY);
    CHECK(got.elements == 2);
  }
  SUBCASE("one past it") {
    o.max_reply_elements = 7;
    RedisClient client(o);
    Outcome got = RunGet(client);
    CHECK(got.status.code() == StatusCode::kIoError);
    CHECK(Mentions(got.status, "array elements"));
  }
}

TEST_CASE("redis client: strings that sum past the bound are refused") {
  const std::string part(40 << 10, 'x');
  const std::string bulk = "$" + std::to_string(part.size()) + "\r\n" + part + "\r\n";
  FakeRedis server({"*3\r\n" + bulk + bulk + bulk});
  RedisClientOptions o = OptionsFor(server);
  o.max_reply_bytes = 100 << 10;  // two parts fit, the third does not
  RedisClient client(o);
  Outcome got = RunGet(client);
  CHECK(got.status.code() == StatusCode::kIoError);
  CHECK(Mentions(got.status, "bytes of strings"));
}

TEST_CASE("redis client: a bulk string longer than the bound is refused as it arrives") {
  // It declares 1 GiB and sends 256 KiB, then nothing: the client must not wait for the rest
  // (the command timeout) nor buffer it.
  FakeRedis server({"$1073741824\r\n" + std::string(256 << 10, 'y')});
  RedisClientOptions o = OptionsFor(server);
  o.max_reply_bytes = 64 << 10;
  RedisClient client(o);
  const auto t0 = std::chrono::steady_clock::now();
  Outcome got = RunGet(client);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(got.status.code() == StatusCode::kIoError);
  CHECK(Mentions(got.status, "bytes of one reply"));
  CHECK(took < o.command_timeout);  // refused on the bytes, not timed out
}

TEST_CASE("redis client: after a refused reply the next command runs on a fresh connection") {
  FakeRedis server({"*2000000000\r\n", "+OK\r\n"});
  RedisClient client(OptionsFor(server));
  Outcome refused = RunGet(client);
  CHECK(refused.status.code() == StatusCode::kIoError);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the 1 ms backoff
  Outcome next = RunGet(client);
  CHECK_OK(next.status);
  CHECK(next.type == REDIS_REPLY_STATUS);
  CHECK(next.text == "OK");
  CHECK(server.connections() == 2);  // the refused connection was dropped, not pooled
  CHECK_FALSE(client.Counters().degraded);
}

}  // namespace
}  // namespace hypic::storage
