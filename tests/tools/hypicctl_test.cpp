// hypicctl against a live hypicd (tests/e2e's launcher, builtin:tiny): every subcommand, that
// --json output parses and holds the facts, the exit codes, environment variables, the unix
// socket, an unreachable daemon and a wrong token.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::tools {
namespace {

constexpr char kToken[] = "data-token";
constexpr char kAdmin[] = "admin-token";

struct CtlResult {
  int rc = -1;
  std::string out;
  std::string err;
  nlohmann::json Json() const {
    auto j = nlohmann::json::parse(out, nullptr, false);
    REQUIRE_MESSAGE(!j.is_discarded(), "not JSON: " << out << err);
    return j;
  }
};

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs $HYPIC_BIN_DIR/hypicctl with `args`, stdin from /dev/null (so prompts refuse), the
// HYPIC_* variables of the test process removed and `env` added.
CtlResult RunCtl(const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env = {}) {
  const char* bin_dir = std::getenv("HYPIC_BIN_DIR");
  REQUIRE(bin_dir != nullptr);
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const auto out_path = dir / ("hypicctl_test_out_" + tag);
  const auto err_path = dir / ("hypicctl_test_err_" + tag);
  std::vector<std::string> argv_s = {std::string(bin_dir) + "/hypicctl"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).rfind("HYPIC_", 0) != 0 ||
        std::string_view(*e).rfind("HYPIC_BIN", 0) == 0) {
      env_s.emplace_back(*e);
    }
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CtlResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

class CtlFixture {
 public:
  CtlFixture() {
    e2e::DaemonOptions opts;
    opts.metrics = false;
    opts.args = {"--token", kToken, "--admin-token", kAdmin};
    auto d = e2e::Daemon::Start(opts);
    REQUIRE_OK(d);
    daemon_ = std::move(d).value();
  }

  // Connection flags for the live daemon, plus `args`.
  std::vector<std::string> Args(std::vector<std::string> args) const {
    args.insert(args.end(), {"--port", std::to_string(daemon_->port()), "--token", kToken,
                             "--admin-token", kAdmin});
    return args;
  }
  CtlResult Ctl(const std::vector<std::string>& args) const {
    CtlResult r = RunCtl(Args(args));
    INFO("hypicctl stderr: " << r.err);
    return r;
  }

  // Writes `n` segments of random tokens (within the tiny vocabulary) as JSONL.
  std::string WriteCorpus(size_t n, uint64_t seed) const {
    testing::SeededRng rng(seed);
    const auto path = std::filesystem::path(daemon_->data_dir()) / "corpus.jsonl";
    std::ofstream out(path);
    for (size_t i = 0; i < n; ++i) {
      nlohmann::json line = rng.Tokens(20 + rng.UniformInt(0, 40), 256);
      out << line.dump() << "\n";
    }
    return path.string();
  }

  const e2e::Daemon& daemon() const { return *daemon_; }

 private:
  std::unique_ptr<e2e::Daemon> daemon_;
};

TEST_CASE("hypicctl: warm, ls, stats, pin, verify, evict, flush and config on a live daemon") {
  CtlFixture f;
  const std::string corpus = f.WriteCorpus(12, 3);

  // warm: 12 segments computed; again: all already cached.
  auto warm = f.Ctl({"warm", corpus, "--json", "--batch", "5"});
  REQUIRE(warm.rc == 0);
  CHECK(warm.Json()["segments"] == 12);
  CHECK(warm.Json()["computed"] == 12);
  CHECK(warm.Json()["tokens"].get<uint64_t>() >= 12 * 20);
  auto again = f.Ctl({"warm", corpus, "--json"});
  REQUIRE(again.rc == 0);
  CHECK(again.Json()["already_cached"] == 12);
  auto warm_human = f.Ctl({"warm", corpus});
  CHECK(warm_human.rc == 0);
  CHECK(warm_human.out.find("warmed 12 segments") != std::string::npos);

  // ls: every entry, with filters, sorting and a limit.
  auto ls = f.Ctl({"ls", "--json"});
  REQUIRE(ls.rc == 0);
  const auto entries = ls.Json();
  REQUIRE(entries.size() == 12);
  for (const auto& e : entries) {
    CHECK(e["key"].get<std::string>().size() == 32);
    CHECK(e["tokens"].get<uint32_t>() >= 20);
    CHECK(e["bytes"].get<uint64_t>() > 0);
  }
  auto by_size = f.Ctl({"ls", "--json", "--sort", "size", "--limit", "4"}).Json();
  REQUIRE(by_size.size() == 4);
  for (size_t i = 1; i < by_size.size(); ++i) {
    CHECK(by_size[i - 1]["bytes"].get<uint64_t>() >= by_size[i]["bytes"].get<uint64_t>());
  }
  uint64_t max_bytes = 0;
  for (const auto& e : entries) max_bytes = std::max(max_bytes, e["bytes"].get<uint64_t>());
  CHECK(by_size[0]["bytes"].get<uint64_t>() == max_bytes);
  CHECK(f.Ctl({"ls", "--json", "--namespace", "nobody"}).Json().empty());
  CHECK(f.Ctl({"ls", "--json", "--older-than", "1h"}).Json().empty());
  CHECK(f.Ctl({"ls", "--json", "--older-than", "0s"}).Json().size() == 12);
  auto ls_human = f.Ctl({"ls", "--limit", "2"});
  CHECK(ls_human.rc == 0);
  CHECK(ls_human.out.find("2 of 12 entries") != std::string::npos);
  CHECK(f.Ctl({"ls", "--tier", "floppy"}).rc == 2);

  // stats: the tier table; the JSON counts the entries.
  auto stats = f.Ctl({"stats", "--json"});
  REQUIRE(stats.rc == 0);
  const auto sj = stats.Json();
  REQUIRE(sj.contains("tiers"));
  uint64_t tier_entries = 0;
  for (const auto& t : sj["tiers"]) tier_entries += t.value("entries", uint64_t{0});
  CHECK(tier_entries >= 12);
  auto stats_human = f.Ctl({"stats", "--watch", "0.05", "--count", "2"});
  CHECK(stats_human.rc == 0);
  CHECK(stats_human.out.find("hit_rate") != std::string::npos);
  // --watch printed the table twice.
  const size_t first = stats_human.out.find("tiers");
  CHECK(stats_human.out.find("tiers", first + 1) != std::string::npos);

  // pin / unpin show in ls.
  const std::string key = entries[0]["key"];
  CHECK(f.Ctl({"pin", key}).rc == 0);
  auto pinned = f.Ctl({"ls", "--json"}).Json();
  for (const auto& e : pinned) {
    if (e["key"] == key) CHECK(e["pins"].get<uint32_t>() >= 1);
  }
  auto unpin = f.Ctl({"unpin", key, "--json"});
  CHECK(unpin.rc == 0);
  CHECK(unpin.Json()["unpinned"][0] == key);
  CHECK(f.Ctl({"pin", "not-a-key"}).rc == 2);
  CHECK(f.Ctl({"pin", std::string(32, '0')}).rc == 2);  // NOT_FOUND

  // verify: every entry checked, none corrupt.
  auto verify = f.Ctl({"verify", "--json"});
  CHECK(verify.rc == 0);
  CHECK(verify.Json()["checked"] == 12);
  CHECK(verify.Json()["corrupt"] == 0);
  auto verify_one = f.Ctl({"verify", "--key", key});
  CHECK(verify_one.rc == 0);
  CHECK(verify_one.out.find("verified 1 entries") != std::string::npos);

  // flush, config.
  CHECK(f.Ctl({"flush"}).rc == 0);
  auto config = f.Ctl({"config", "--json"});
  REQUIRE(config.rc == 0);
  CHECK(config.Json()["data_dir"] == f.daemon().data_dir());
  CHECK(config.Json()["admin_token"] != kAdmin);  // redacted
  const std::string toml = f.Ctl({"config"}).out;
  CHECK(toml.find("data_dir = ") != std::string::npos);
  CHECK(toml.find("\n[[tenant]]\nname = \"default\"\n") != std::string::npos);

  // evict: refuses without --yes when there is no terminal, then by key, bytes, all.
  auto refused = f.Ctl({"evict", "--all"});
  CHECK(refused.rc == 2);
  CHECK(refused.err.find("--yes") != std::string::npos);
  CHECK(f.Ctl({"ls", "--json"}).Json().size() == 12);
  CHECK(f.Ctl({"evict"}).rc == 2);  // nothing selected
  // Counts are per tier copy: an entry written through to the SSD tier counts twice.
  auto by_key = f.Ctl({"evict", "--key", key, "--yes", "--json"});
  CHECK(by_key.rc == 0);
  CHECK(by_key.Json()["evicted_entries"].get<uint64_t>() >= 1);
  for (const auto& e : f.Ctl({"ls", "--json"}).Json()) CHECK(e["key"] != key);
  auto by_bytes = f.Ctl({"evict", "--bytes", "1", "--yes", "--json"});
  CHECK(by_bytes.rc == 0);
  CHECK(by_bytes.Json()["evicted_entries"].get<uint64_t>() >= 1);
  auto old = f.Ctl({"evict", "--older-than", "1h", "--yes", "--json"});
  CHECK(old.Json()["evicted_entries"] == 0);
  const size_t left = f.Ctl({"ls", "--json"}).Json().size();
  CHECK(left <= 10);
  auto all = f.Ctl({"evict", "--all", "--yes", "--json"});
  CHECK(all.rc == 0);
  CHECK(all.Json()["evicted_entries"].get<uint64_t>() >= left);
  CHECK(f.Ctl({"ls", "--json"}).Json().empty());
}

TEST_CASE("hypicctl: environment variables, the unix socket, bad input") {
  CtlFixture f;
  const std::map<std::string, std::string> env = {{"HYPIC_PORT", std::to_string(f.daemon().port())},
                                                  {"HYPIC_TOKEN", kToken},
                                                  {"HYPIC_ADMIN_TOKEN", kAdmin}};
  auto via_env = RunCtl({"stats", "--json"}, env);
  CHECK(via_env.rc == 0);
  CHECK(via_env.Json().contains("server"));

  auto via_unix = RunCtl({"ls", "--json", "--unix", f.daemon().unix_path(), "--token", kToken,
                          "--admin-token", kAdmin});
  CHECK(via_unix.rc == 0);
  CHECK(via_unix.Json().is_array());

  const auto bad = std::filesystem::path(f.daemon().data_dir()) / "bad.jsonl";
  std::ofstream(bad) << "[1,2,3]\n[1,2\n";
  auto warm_bad = f.Ctl({"warm", bad.string()});
  CHECK(warm_bad.rc == 2);
  CHECK(warm_bad.err.find("line 2") != std::string::npos);
  CHECK(f.Ctl({"warm", bad.string() + ".missing"}).rc == 1);  // IO_ERROR reading the file
  CHECK(f.Ctl({"stats", "--no-such-flag"}).rc == 2);
}

TEST_CASE("hypicctl: wrong tokens and a missing admin grant are exit 2 with a clear message") {
  CtlFixture f;
  const std::string port = std::to_string(f.daemon().port());
  const std::string corpus = f.WriteCorpus(2, 9);
  auto wrong = RunCtl({"warm", corpus, "--port", port, "--token", "wrong"});
  CHECK(wrong.rc == 2);
  CHECK(wrong.err.find("UNAUTHORIZED") != std::string::npos);
  CHECK(wrong.err.find("--token") != std::string::npos);
  auto wrong_admin = RunCtl({"stats", "--port", port, "--token", kToken, "--admin-token", "nope"});
  CHECK(wrong_admin.rc == 2);
  CHECK(wrong_admin.err.find("--admin-token") != std::string::npos);

  auto no_admin = RunCtl({"ls", "--port", port, "--token", kToken});
  CHECK(no_admin.rc == 2);
  CHECK(no_admin.err.find("admin") != std::string::npos);

  // warm is a data-plane command: the data token suffices.
  CHECK(RunCtl({"warm", corpus, "--port", port, "--token", kToken}).rc == 0);
}

TEST_CASE("hypicctl: an unreachable daemon is exit 3 with a hint") {
  // A port nobody listens on: bind one, note it, close it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  ::close(fd);
  for (const std::string cmd : {"stats", "ls", "verify", "flush", "config"}) {
    CAPTURE(cmd);
    auto r = RunCtl({cmd, "--port", port});
    CHECK(r.rc == 3);
    CHECK(r.err.find("cannot reach hypicd") != std::string::npos);
  }
  auto unix_missing = RunCtl({"stats", "--unix", "/nonexistent/hypicd.sock"});
  CHECK(unix_missing.rc == 3);
}

TEST_CASE("hypicctl: on the daemon's host it uses the unix socket, where its uid is admin") {
  e2e::DaemonOptions opts;
  opts.metrics = false;
  auto d = e2e::Daemon::Start(opts);  // no admin token: admin only over the unix socket
  REQUIRE_OK(d);
  const std::map<std::string, std::string> env = {{"HYPIC_DATA_DIR", (*d)->data_dir()}};
  auto local = RunCtl({"stats", "--json"}, env);
  INFO("hypicctl stderr: " << local.err);
  CHECK(local.rc == 0);
  // An explicit TCP endpoint is used as given: there admin needs the admin token.
  auto tcp = RunCtl({"stats", "--port", std::to_string((*d)->port())}, env);
  CHECK(tcp.rc == 2);
  CHECK(tcp.err.find("--admin-token") != std::string::npos);
}

}  // namespace
}  // namespace hypic::tools
