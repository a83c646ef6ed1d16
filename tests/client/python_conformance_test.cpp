// Cross-language conformance: the Python client (client/python/hypic_client.py) and protocol/
// must agree byte for byte. Python writes request frames that must equal protocol/'s
// encoding of the same messages; protocol/ writes reply frames (chunked ones too) that Python
// must decode to the same values. The Python side is tests/client/python/conformance.py.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tests/support/check_ok.h"

namespace hypic::protocol {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string Script() {
  return Env("HYPIC_SOURCE_DIR", ".") + "/tests/client/python/conformance.py";
}

Hash128 K1() {
  std::byte b[16];
  for (int i = 0; i < 16; ++i) b[i] = std::byte(i);
  return Hash128::FromBytes(b);
}
Hash128 K2() {
  std::byte b[16];
  for (int i = 0; i < 16; ++i) b[i] = std::byte(16 + i);
  return Hash128::FromBytes(b);
}

Bytes Frame(Opcode op, uint64_t id, const Bytes& body, const Bytes& ext = {}, Hash128 key = {},
            uint32_t deadline_ms = 0, uint8_t flags = 0, StatusCode status = StatusCode::kOk) {
  FrameHeader h;
  h.opcode = op;
  h.flags = flags;
  h.checksum_kind = ChecksumKind::kCrc32;
  h.request_id = id;
  h.key = key;
  h.deadline_ms = deadline_ms;
  h.status = static_cast<uint16_t>(status);
  return EncodeFrame(h, ByteSpan(ext), ByteSpan(body)).value();
}

Bytes Text(std::string_view s) {
  return Bytes(reinterpret_cast<const std::byte*>(s.data()),
               reinterpret_cast<const std::byte*>(s.data()) + s.size());
}

Bytes ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> v((std::istreambuf_iterator<char>(in)), {});
  return Bytes(reinterpret_cast<const std::byte*>(v.data()),
               reinterpret_cast<const std::byte*>(v.data()) + v.size());
}

void WriteAll(const fs::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::string RunPython(const std::string& args, int* code) {
  std::string cmd = Env("HYPIC_PYTHON", "python3") + " " + Script() + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *code = pclose(p);
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/hypic-conformance-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST_CASE("Python request frames equal protocol/'s encoding byte for byte") {
  TempDir dir;
  int code = -1;
  RunPython("write-requests " + dir.path.string(), &code);
  REQUIRE(code == 0);

  ComposeRequest compose;
  compose.name_space = "tenant";
  compose.mode = ComposeMode::kOracle;
  compose.top_k = 5;
  compose.return_state = true;
  compose.parts = {{PartKind::kRaw, {}, {9, 8}},
                   {PartKind::kSegmentTokens, {}, {1, 2, 3}},
                   {PartKind::kSegmentKey, K1(), {}}};
  std::map<std::string, Bytes> want = {
      {"hello", Frame(Opcode::kHello, 1, Encode(HelloRequest{1, 1, 6, "py", "tok", "adm"}))},
      {"ping", Frame(Opcode::kPing, 2, Text("ping!"))},
      {"has", Frame(Opcode::kHas, 3, Encode(HasRequest{{K1(), K2()}}))},
      {"get", Frame(Opcode::kGet, 4, {}, {}, K1(), 1500)},
      {"put", Frame(Opcode::kPut, 5, Text("entry-bytes"), Encode(PutOptions{60, true}), K2())},
      {"prefill",
       Frame(Opcode::kPrefill, 6, Encode(PrefillRequest{"tenant", 8, {{1, 2, 3}, {}, {7}}}))},
      {"compose", Frame(Opcode::kCompose, 7, Encode(compose))},
      {"compose_options",
       Frame(Opcode::kCompose, 11,
             Encode(ComposeRequest{
                 "", ComposeMode::kFull, kDefaultSeam, 1, true, {{PartKind::kRaw, {}, {4}}}}),
             Encode(ComposeOptions{DType::kBF16, LogitsMode::kFull}))},
      {"compose_state_first",
       Frame(Opcode::kCompose, 12,
             Encode(ComposeRequest{
                 "", ComposeMode::kFull, kDefaultSeam, 1, true, {{PartKind::kRaw, {}, {4}}}}),
             Encode(ComposeOptions{DType::kBF16, LogitsMode::kFull, StateLayout::kStateFirst}))},
      {"evict", Frame(Opcode::kEvict, 8,
                      Encode(EvictRequest{EvictBy::kBytes, {}, "", Tier::kHost, 1 << 30}))},
      {"list", Frame(Opcode::kList, 9, Encode(ListRequest{77, 50, "tenant", Tier::kSsd}))},
      {"verify", Frame(Opcode::kVerify, 10, {}, {}, K2())},
  };
  for (const auto& [name, bytes] : want) {
    CAPTURE(name);
    CHECK(ReadAll(dir.path / ("req_" + name)) == bytes);
  }
}

TEST_CASE("Python decodes protocol/'s reply frames to the same values") {
  TempDir dir;
  auto write = [&](const std::string& name, const Bytes& b) {
    WriteAll(dir.path / ("rep_" + name), b);
  };
  const uint8_t R = kFlagReply;

  HelloReply hello;
  hello.version = 1;
  hello.features = kFeatureXxh3 | kFeatureChunked;
  hello.server_version = "hypicd test";
  hello.model_fingerprint = K2();
  hello.model_name = "builtin:small";
  hello.seam_w = 8;
  hello.format_version = 1;
  hello.limits = ServerLimits{1 << 20, 1 << 24, 32, 1 << 26, 1000, 100};
  hello.admin = true;
  hello.state_contract = 7;
  write("hello", Frame(Opcode::kHello, 1, Encode(hello), {}, {}, 0, R));
  write("has", Frame(Opcode::kHas, 3, Encode(HasReply{{Tier::kHost, Tier::kNone, Tier::kSsd}}), {},
                     {}, 0, R));
  Bytes get_ext = Encode(GetInfo{Tier::kHbm});
  write("get", [&] {
    Bytes all = Frame(Opcode::kGet, 4, Text("abc"), get_ext, K1(), 0, R | kFlagMore);
    Bytes b = Frame(Opcode::kGet, 4, Text("defg"), {}, K1(), 0, R | kFlagMore);
    Bytes c = Frame(Opcode::kGet, 4, Text("h"), {}, K1(), 0, R);
    all.insert(all.end(), b.begin(), b.end());
    all.insert(all.end(), c.begin(), c.end());
    return all;
  }());
  PrefillReply prefill{{{K1(), true, Tier::kHost, 100, 12345}, {K2(), false, Tier::kSsd, 7, 99}},
                       {1, 2, 3, 4, 5}};
  write("prefill", Frame(Opcode::kPrefill, 6, Encode(prefill), {}, {}, 0, R));
  std::vector<float> s = {1.5f, -2.0f, 3.25f, 0.0f, 8.0f, -0.5f};
  std::vector<uint16_t> k = {1, 2, 3, 0xffff};
  std::vector<StreamTensor> tensors = {{0, TensorKind::kState, DType::kF32, Shape{2, 3},
                                        ByteSpan(reinterpret_cast<const std::byte*>(s.data()), 24)},
                                       {3, TensorKind::kKey, DType::kBF16, Shape{1, 2, 2},
                                        ByteSpan(reinterpret_cast<const std::byte*>(k.data()), 8)}};
  ComposeReply compose;
  compose.parts = {{PartOutcome::kLive, Tier::kNone, 2, {}},
                   {PartOutcome::kMiss, Tier::kHost, 3, K1()}};
  compose.timings = {10, 20, 30, 40, 100};
  compose.n_tokens = 5;
  compose.top = {{42, 3.5f}, {7, -1.25f}};
  compose.logits = {0.5f, -3.0f, 42.0f};
  compose.has_state = true;
  compose.state = EncodeTensorStream(tensors).value();
  write("compose", Frame(Opcode::kCompose, 7, Encode(compose), {}, {}, 0, R));
  // The same reply state first: the stream, then the head, in two chunks split inside a tensor.
  write("compose_state_first", [&] {
    ComposeReply head = compose;
    head.state.clear();
    Bytes body = compose.state;
    const Bytes h = Encode(head);
    body.insert(body.end(), h.begin(), h.end());
    Bytes all = Frame(Opcode::kCompose, 12, Bytes(body.begin(), body.begin() + 30), {}, {}, 0,
                      R | kFlagMore);
    Bytes rest = Frame(Opcode::kCompose, 12, Bytes(body.begin() + 30, body.end()), {}, {}, 0, R);
    all.insert(all.end(), rest.begin(), rest.end());
    return all;
  }());
  write("evict", Frame(Opcode::kEvict, 8, Encode(EvictReply{3, 4096}), {}, {}, 0, R));
  ListReply list{0,
                 {{K1(), Tier::kSsd, "tenant", 64, 1 << 20, 5, 1700000000000, 1, 0},
                  {K2(), Tier::kHost, "", 8, 4096, 0, 0, 0, 3600}}};
  write("list", Frame(Opcode::kList, 9, Encode(list), {}, {}, 0, R));
  write("verify", Frame(Opcode::kVerify, 10, Encode(VerifyReply{10, 1, {K2()}}), {}, K2(), 0, R));
  write("error", Frame(Opcode::kGet, 11, Text("missing"), {}, K1(), 0, R, StatusCode::kNotFound));
  write("goaway", EncodeGoAway(Busy("full")));

  int code = -1;
  std::string out = RunPython("read-replies " + dir.path.string(), &code);
  REQUIRE(code == 0);
  nlohmann::json j = nlohmann::json::parse(out);

  CHECK(j["hello"]["version"] == 1);
  CHECK(j["hello"]["features"] == hello.features);
  CHECK(j["hello"]["server_version"] == "hypicd test");
  CHECK(j["hello"]["model"] == K2().ToHex());
  CHECK(j["hello"]["model_name"] == "builtin:small");
  CHECK(j["hello"]["max_frame_body"] == 1 << 20);
  CHECK(j["hello"]["max_inflight"] == 32);
  CHECK(j["hello"]["admin"] == true);
  CHECK(j["hello"]["state_contract"] == 7);
  CHECK(j["has"]["tiers"] == nlohmann::json::array({2, 0, 3}));
  CHECK(j["get"]["chunks"] == 3);
  CHECK(j["get"]["tier"] == 1);
  CHECK(j["get"]["body"] == "6162636465666768");  // "abcdefgh"
  CHECK(j["prefill"]["results"][0] == nlohmann::json::array({K1().ToHex(), true, 2, 100, 12345}));
  CHECK(j["prefill"]["results"][1] == nlohmann::json::array({K2().ToHex(), false, 3, 7, 99}));
  CHECK(j["prefill"]["total_us"] == 5);
  CHECK(j["compose"]["n_tokens"] == 5);
  CHECK(j["compose"]["compose_us"] == 40);
  CHECK(j["compose"]["parts"][1] == nlohmann::json::array({1, 2, 3, K1().ToHex()}));
  CHECK(j["compose"]["top"][0][0] == 42);
  CHECK(j["compose"]["top"][0][1] == 3.5);
  CHECK(j["compose"]["top"][1][1] == -1.25);
  CHECK(j["compose"]["logits"] == nlohmann::json::array({0.5, -3.0, 42.0}));
  REQUIRE(j["compose"]["tensors"].size() == 2);
  CHECK(j["compose"]["tensors"][0][0] == 0);
  CHECK(j["compose"]["tensors"][0][3] == nlohmann::json::array({2, 3}));
  CHECK(j["compose"]["tensors"][1][1] == 3);
  CHECK(j["compose"]["tensors"][1][2] == 2);
  CHECK(j["compose"]["tensors"][1][4] == "010002000300ffff");
  CHECK(j["compose_state_first"]["chunks"] == 2);
  for (const char* field : {"parts", "n_tokens", "top", "logits", "compose_us", "tensors"}) {
    CAPTURE(field);
    CHECK(j["compose_state_first"][field] == j["compose"][field]);
  }
  CHECK(j["evict"]["evicted"] == nlohmann::json::array({3, 4096}));
  CHECK(j["list"]["entries"][0] ==
        nlohmann::json::array({K1().ToHex(), 3, "tenant", 64, 1 << 20, 5, 1700000000000, 1, 0}));
  CHECK(j["list"]["entries"][1][8] == 3600);
  CHECK(j["verify"]["bad_keys"] == nlohmann::json::array({K2().ToHex()}));
  CHECK(j["error"]["status"] == 1);
  CHECK(j["error"]["message"] == "missing");
  CHECK(j["goaway"]["status"] == 6);
  CHECK(j["goaway"]["message"] == "full");
}

}  // namespace
}  // namespace hypic::protocol
