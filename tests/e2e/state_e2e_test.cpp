// End to end against the real hypicd: the composed state is the frontend contract
// (docs/state-format.md). A state COMPOSE returned over the wire is loaded into a fresh decode
// context of the same model (in this process) and decoded greedily with Model::Extend:
//  * modes full and oracle (f32 entries), f32 state: the same 16 tokens as decoding after
//  FullPrefill, and logits
//    within 1e-5 relative at every step (the first step's from the reply's full logits row);
//  * mode hypic: token agreement and KL per step are reported (it is approximate by design);
//  * state_dtype bf16: every tensor is exactly the round-to-nearest-even of the f32 state, and
//    decoding from it stays within the bound derived in docs/state-format.md §7.
// Also: the per-layer stream equals the whole state, in both layouts (state first: the layers
// stream while the compose runs, cold or warm, bitwise the head-first state); the options that
// cannot be honoured get a clear status (unknown dtype, return_state in prefix mode, a reply over
// one frame for a client without CHUNKED, a stream over max_message_bytes, state first without
// CHUNKED or return_state, an unknown layout); a client that stops reading mid-stream, in either
// layout, is closed by the write deadline and the compute worker is freed.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "client/client.h"
#include "gpu/model/model.h"
#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

using protocol::ComposeMode;
using protocol::Opcode;

constexpr int kDecodeSteps = 16;

std::unique_ptr<client::Client> Connect(const Daemon& d) {
  client::ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(d.port());
  o.io_timeout_ms = 120000;
  auto c = client::Client::Connect(o);
  REQUIRE_OK(c);
  return std::move(c).value();
}

std::vector<uint32_t> Range(uint32_t from, uint32_t n, uint32_t stride = 7) {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < n; ++i) v.push_back((from + i * stride) % 500 + 1);
  return v;
}

// A prompt of a raw prefix, two cached segments and a raw question.
protocol::ComposeRequest Prompt(ComposeMode mode) {
  protocol::ComposeRequest req;
  req.name_space = "decode";
  req.mode = mode;
  req.top_k = 4;
  req.return_state = true;
  req.parts = {{protocol::PartKind::kRaw, {}, Range(3, 5)},
               {protocol::PartKind::kSegmentTokens, {}, Range(11, 40)},
               {protocol::PartKind::kSegmentTokens, {}, Range(29, 33)},
               {protocol::PartKind::kRaw, {}, Range(71, 6)}};
  return req;
}

std::vector<uint32_t> AllTokens(const protocol::ComposeRequest& req) {
  std::vector<uint32_t> all;
  for (const auto& p : req.parts) all.insert(all.end(), p.tokens.begin(), p.tokens.end());
  return all;
}

uint32_t Argmax(const std::vector<float>& v) {
  return static_cast<uint32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// max |a - b| / max |b|: the relative error of a logits row.
double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den == 0 ? num : num / den;
}

// KL(p_ref || p) of the softmaxes, in nats.
double Kl(const std::vector<float>& ref, const std::vector<float>& got) {
  auto logsoftmax = [](const std::vector<float>& x) {
    double m = *std::max_element(x.begin(), x.end()), s = 0;
    for (float v : x) s += std::exp(v - m);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - m - std::log(s);
    return out;
  };
  auto lp = logsoftmax(ref), lq = logsoftmax(got);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return kl;
}

struct Decoded {
  std::vector<uint32_t> tokens;            // kDecodeSteps greedy tokens
  std::vector<std::vector<float>> logits;  // the row each token was chosen from
};

// Greedy decoding: the first token from `logits`, then one Extend per token.
Decoded Decode(const model::Model& m, model::ModelState state, std::vector<float> logits) {
  Decoded d;
  for (int step = 0; step < kDecodeSteps; ++step) {
    uint32_t t = Argmax(logits);
    d.tokens.push_back(t);
    d.logits.push_back(logits);
    if (step + 1 == kDecodeSteps) break;
    auto r = m.Extend(state, std::span<const uint32_t>(&t, 1));
    REQUIRE_OK(r);
    logits.assign(r->logits.end() - m.config().vocab_size, r->logits.end());
  }
  return d;
}

model::ModelState LoadState(const model::Model& m, const protocol::ComposeReply& reply) {
  auto tensors = client::DecodeState(reply);
  REQUIRE_OK(tensors);
  std::vector<model::StateTensorView> views;
  for (const auto& t : *tensors)
    views.push_back({t.layer, t.kind, t.dtype, t.shape, t.data.data()});
  auto state = m.StateFromTensors(reply.n_tokens, views);
  REQUIRE_OK(state);
  return std::move(state).value();
}

struct Fixture {
  std::unique_ptr<Daemon> daemon;
  std::shared_ptr<const model::Model> model;
  Decoded reference;  // after FullPrefill of the whole prompt
  std::vector<uint32_t> prompt;

  std::vector<std::string> args_;

  explicit Fixture(std::vector<std::string> args = {}) : args_(std::move(args)) {
    DaemonOptions o;
    o.args = args_;
    auto d = Daemon::Start(o);
    REQUIRE_OK(d);
    daemon = std::move(d).value();
    // The daemon's weights precision, so both run the same kernels (the fingerprints agree).
    model::ReadOptions read;
    if (std::find(args_.begin(), args_.end(), "f32") != args_.end()) {
      read.weights = model::WeightsDType::kF32;
    }
    auto m = model::LoadModel("builtin:tiny", ModelCacheDir(), read);
    REQUIRE_OK(m);
    model = *m;
    prompt = AllTokens(Prompt(ComposeMode::kFull));
    auto full = model->FullPrefill(prompt);
    REQUIRE_OK(full);
    reference = Decode(*model, std::move(full->state), full->logits);
  }
};

protocol::ComposeReply ComposeOver(client::Client& c, ComposeMode mode, DType dtype) {
  auto reply = c.Compose(Prompt(mode), {dtype, protocol::LogitsMode::kFull}, 120000);
  REQUIRE_OK(reply);
  return std::move(reply).value();
}

TEST_CASE("decoding from the state COMPOSE returned: full and oracle match FullPrefill exactly") {
  // Oracle entries are exact only when stored exactly (the default entry_dtype rounds S, the
  // conv tail and K/V to bf16, docs/entry-precision.md) and computed in fp32: with bf16 GEMM
  // weights the attention takes bf16 products, whose rounding depends on the row blocking.
  Fixture f({"--entry-dtype", "f32", "--weights-dtype", "f32"});
  auto c = Connect(*f.daemon);
  REQUIRE(c->hello_reply()->model_fingerprint == f.model->fingerprint());
  REQUIRE(f.model->weights_dtype() == DType::kF32);
  REQUIRE(c->hello_reply()->state_contract == protocol::kStateContractVersion);
  for (ComposeMode mode : {ComposeMode::kFull, ComposeMode::kOracle}) {
    CAPTURE(protocol::ComposeModeName(mode));
    protocol::ComposeReply reply = ComposeOver(*c, mode, DType::kF32);
    REQUIRE(reply.n_tokens == f.prompt.size());
    REQUIRE(reply.logits.size() == static_cast<size_t>(f.model->config().vocab_size));
    REQUIRE(!reply.top.empty());
    CHECK(reply.top[0].token == Argmax(reply.logits));
    Decoded got = Decode(*f.model, LoadState(*f.model, reply), reply.logits);
    CHECK(got.tokens == f.reference.tokens);
    for (int step = 0; step < kDecodeSteps; ++step) {
      CAPTURE(step);
      CHECK(RelError(got.logits[step], f.reference.logits[step]) <= 1e-5);
    }
  }
}

TEST_CASE("decoding from a hypic-mode state: token agreement and KL per step, reported") {
  Fixture f;
  auto c = Connect(*f.daemon);
  protocol::ComposeReply reply = ComposeOver(*c, ComposeMode::kHypic, DType::kF32);
  Decoded got = Decode(*f.model, LoadState(*f.model, reply), reply.logits);
  int agree = 0;
  std::string per_step;
  for (int step = 0; step < kDecodeSteps; ++step) {
    double kl = Kl(f.reference.logits[step], got.logits[step]);
    CHECK(std::isfinite(kl));
    CHECK(kl >= -1e-9);
    agree += got.tokens[step] == f.reference.tokens[step] ? 1 : 0;
    per_step += fmt::format(" {}:{}{:.2e}", step,
                            got.tokens[step] == f.reference.tokens[step] ? "=" : "x", kl);
  }
  MESSAGE("hypic mode, tiny model: " << agree << "/" << kDecodeSteps
                                     << " greedy tokens agree; KL per step (nats):" << per_step);
}

TEST_CASE("a bf16 state is the f32 state rounded once; decoding from it stays within bound") {
  Fixture f;
  auto c = Connect(*f.daemon);
  protocol::ComposeReply f32 = ComposeOver(*c, ComposeMode::kFull, DType::kF32);
  protocol::ComposeReply bf16 = ComposeOver(*c, ComposeMode::kFull, DType::kBF16);
  auto a = client::DecodeState(f32), b = client::DecodeState(bf16);
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  REQUIRE(a->size() == b->size());
  CHECK(bf16.state.size() < f32.state.size());
  for (size_t i = 0; i < a->size(); ++i) {
    const auto& x = (*a)[i];
    const auto& y = (*b)[i];
    CAPTURE(i);
    REQUIRE(y.dtype == DType::kBF16);
    REQUIRE(x.shape == y.shape);
    const auto* fx = reinterpret_cast<const float*>(x.data.data());
    const auto* hy = reinterpret_cast<const uint16_t*>(y.data.data());
    size_t mismatches = 0;
    for (int64_t e = 0; e < x.shape.NumElements(); ++e) mismatches += F32ToBf16(fx[e]) != hy[e];
    CHECK(mismatches == 0);
  }
  // The bound (docs/state-format.md §7): logits within 2e-2 relative of the f32 state's at every
  // step of the same token sequence (teacher-forced, so one early flip does not change what is
  // compared), and the greedy token equal wherever the f32 top-1 margin exceeds twice that
  // error.
  Decoded from_f32 = Decode(*f.model, LoadState(*f.model, f32), f32.logits);
  model::ModelState state = LoadState(*f.model, bf16);
  std::vector<float> logits = bf16.logits;
  double worst = 0;
  for (int step = 0; step < kDecodeSteps; ++step) {
    CAPTURE(step);
    const std::vector<float>& ref = from_f32.logits[step];
    double err = RelError(logits, ref);
    worst = std::max(worst, err);
    CHECK(err <= 2e-2);
    std::vector<float> sorted = ref;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    double scale = std::fabs(*std::max_element(
        ref.begin(), ref.end(), [](float p, float q) { return std::fabs(p) < std::fabs(q); }));
    if (sorted[0] - sorted[1] > 2 * err * scale) CHECK(Argmax(logits) == from_f32.tokens[step]);
    if (step + 1 == kDecodeSteps) break;
    uint32_t t = from_f32.tokens[step];
    auto r = f.model->Extend(state, std::span<const uint32_t>(&t, 1));
    REQUIRE_OK(r);
    logits.assign(r->logits.end() - f.model->config().vocab_size, r->logits.end());
  }
  MESSAGE("bf16 state, tiny model: worst logits error over " << kDecodeSteps
                                                             << " steps = " << worst);
}

TEST_CASE("the per-layer stream delivers the whole state's tensors, layer by layer, in order") {
  Fixture f;
  auto c = Connect(*f.daemon);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    CAPTURE(DTypeName(dtype));
    protocol::ComposeReply whole = ComposeOver(*c, ComposeMode::kFull, dtype);
    auto want = client::DecodeState(whole);
    REQUIRE_OK(want);
    std::vector<uint32_t> layers;
    std::vector<protocol::OwnedStreamTensor> got;
    auto streamed = c->ComposeStreaming(
        Prompt(ComposeMode::kFull), {dtype, protocol::LogitsMode::kTopK},
        [&](uint32_t layer, std::vector<protocol::OwnedStreamTensor>& tensors) {
          layers.push_back(layer);
          for (auto& t : tensors) got.push_back(std::move(t));
          return Status::Ok();
        },
        120000);
    REQUIRE_OK(streamed);
    CHECK(streamed->has_state);
    CHECK(streamed->state.empty());
    CHECK(streamed->logits.empty());
    CHECK(streamed->top == whole.top);
    std::vector<uint32_t> want_layers(static_cast<size_t>(f.model->config().num_layers));
    std::iota(want_layers.begin(), want_layers.end(), 0u);
    CHECK(layers == want_layers);
    REQUIRE(got.size() == want->size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].layer == (*want)[i].layer);
      CHECK(got[i].kind == (*want)[i].kind);
      CHECK(got[i].dtype == dtype);
      CHECK(got[i].shape == (*want)[i].shape);
      CHECK(std::equal(got[i].data.begin(), got[i].data.end(), (*want)[i].data.begin(),
                       (*want)[i].data.end()));
    }
  }
  // A callback error stops the delivery and is what ComposeStreaming returns; the connection
  // stays usable (the rest of the stream was read and dropped).
  int calls = 0;
  auto stopped = c->ComposeStreaming(Prompt(ComposeMode::kFull), {},
                                     [&](uint32_t, std::vector<protocol::OwnedStreamTensor>&) {
                                       ++calls;
                                       return Cancelled("the frontend has no slot");
                                     });
  CHECK(stopped.status().code() == StatusCode::kCancelled);
  CHECK(calls == 1);
  CHECK_OK(c->Ping(AsBytes("still here")).status());
}

// A state-first ComposeStreaming: the layers in arrival order and their tensors.
struct Streamed {
  protocol::ComposeReply head;
  std::vector<uint32_t> layers;
  std::vector<protocol::OwnedStreamTensor> tensors;
};

Streamed ComposeStateFirst(client::Client& c, const protocol::ComposeRequest& req, DType dtype) {
  Streamed s;
  auto reply = c.ComposeStreaming(
      req, {dtype, protocol::LogitsMode::kFull, protocol::StateLayout::kStateFirst},
      [&](uint32_t layer, std::vector<protocol::OwnedStreamTensor>& tensors) {
        s.layers.push_back(layer);
        for (auto& t : tensors) s.tensors.push_back(std::move(t));
        return Status::Ok();
      },
      120000);
  REQUIRE_OK(reply);
  s.head = std::move(reply).value();
  return s;
}

// `got` is bitwise the state `want` carries, tensor by tensor.
void CheckSameState(const std::vector<protocol::OwnedStreamTensor>& got,
                    const protocol::ComposeReply& want) {
  auto tensors = client::DecodeState(want);
  REQUIRE_OK(tensors);
  REQUIRE(got.size() == tensors->size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    const protocol::StreamTensor& w = (*tensors)[i];
    CHECK(got[i].layer == w.layer);
    CHECK(got[i].kind == w.kind);
    CHECK(got[i].dtype == w.dtype);
    CHECK(got[i].shape == w.shape);
    CHECK(std::equal(got[i].data.begin(), got[i].data.end(), w.data.begin(), w.data.end()));
  }
}

TEST_CASE("state first: the layers stream in order, bitwise the head-first state; cold and warm") {
  Fixture f;
  auto c = Connect(*f.daemon);
  REQUIRE((c->hello_reply()->features & protocol::kFeatureStateFirst) != 0);
  std::vector<uint32_t> all_layers(static_cast<size_t>(f.model->config().num_layers));
  std::iota(all_layers.begin(), all_layers.end(), 0u);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    CAPTURE(DTypeName(dtype));
    // Mode hypic on a fresh namespace: the first compose misses every segment (the cold path,
    // whose last fold pass streams the layers); the head-first one after it hits them all.
    protocol::ComposeRequest req = Prompt(ComposeMode::kHypic);
    req.name_space = fmt::format("first-{}", DTypeName(dtype));
    Streamed cold = ComposeStateFirst(*c, req, dtype);
    CHECK(cold.head.parts[1].outcome == protocol::PartOutcome::kMiss);
    CHECK(cold.head.parts[1].tier != protocol::Tier::kNone);  // stored: known once composed
    auto warm = c->Compose(req, {dtype, protocol::LogitsMode::kFull}, 120000);
    REQUIRE_OK(warm);
    CHECK(warm->parts[1].outcome == protocol::PartOutcome::kHit);
    CHECK(cold.layers == all_layers);
    CheckSameState(cold.tensors, *warm);
    CHECK(cold.head.has_state);
    CHECK(cold.head.state.empty());
    CHECK(cold.head.n_tokens == warm->n_tokens);
    CHECK(cold.head.top == warm->top);
    CHECK(cold.head.logits == warm->logits);
    // Warm and in mode full too; and the whole state-first reply through Compose.
    Streamed hot = ComposeStateFirst(*c, req, dtype);
    CHECK(hot.layers == all_layers);
    CheckSameState(hot.tensors, *warm);
    protocol::ComposeRequest full = Prompt(ComposeMode::kFull);
    auto head_first = c->Compose(full, {dtype, protocol::LogitsMode::kFull}, 120000);
    REQUIRE_OK(head_first);
    CheckSameState(ComposeStateFirst(*c, full, dtype).tensors, *head_first);
    auto whole = c->Compose(
        full, {dtype, protocol::LogitsMode::kFull, protocol::StateLayout::kStateFirst}, 120000);
    REQUIRE_OK(whole);
    CHECK(whole->state == head_first->state);
    CHECK(whole->top == head_first->top);
    CHECK(whole->logits == head_first->logits);
  }
  CHECK_OK(c->Ping(AsBytes("still here")).status());
}

// COMPOSE over a RawConn, with `ext` as the options.
ReplyFrame RawCompose(RawConn& conn, const protocol::ComposeRequest& req, protocol::Bytes ext) {
  auto r = conn.Call(Opcode::kCompose, protocol::Encode(req), ext, {}, 60s);
  REQUIRE_OK(r);
  return std::move(r).value();
}

TEST_CASE("state options that cannot be honoured get a clear status") {
  DaemonOptions o;
  o.args = {"--max-body-bytes", "64KiB", "--max-message-bytes", "1MiB"};
  auto d = Daemon::Start(o);
  REQUIRE_OK(d);
  // A prompt whose f32 state is ~240 KiB on the tiny model: over one 64 KiB frame.
  protocol::ComposeRequest big = Prompt(ComposeMode::kFull);
  big.parts = {{protocol::PartKind::kRaw, {}, Range(5, 400)}};
  protocol::ComposeRequest small_prompt = big;
  small_prompt.parts = {{protocol::PartKind::kRaw, {}, Range(5, 20)}};

  auto plain = RawConn::Tcp((*d)->port());
  REQUIRE_OK(plain);
  REQUIRE_OK(plain->Hello());  // no CHUNKED
  ReplyFrame r = RawCompose(*plain, big, {});
  CHECK(r.status() == StatusCode::kTooLarge);
  CHECK_MESSAGE(r.text().find("CHUNKED") != std::string::npos, r.text());
  // An unknown dtype value (the decoder) and a known one the state cannot be sent in.
  r = RawCompose(*plain, big, protocol::Bytes{std::byte{9}, std::byte{0}});
  CHECK(r.status() == StatusCode::kBadRequest);
  r = RawCompose(*plain, big, protocol::Encode(protocol::ComposeOptions{DType::kI32}));
  CHECK(r.status() == StatusCode::kBadRequest);
  CHECK_MESSAGE(r.text().find("state_dtype I32") != std::string::npos, r.text());
  // The state-first layout: to a client without CHUNKED (it streams while the compose runs),
  // without return_state, or as an unknown layout byte.
  const protocol::Bytes state_first = protocol::Encode(protocol::ComposeOptions{
      DType::kF32, protocol::LogitsMode::kTopK, protocol::StateLayout::kStateFirst});
  r = RawCompose(*plain, small_prompt, state_first);
  CHECK(r.status() == StatusCode::kBadRequest);
  CHECK_MESSAGE(r.text().find("announce CHUNKED") != std::string::npos, r.text());
  protocol::ComposeRequest stateless = small_prompt;
  stateless.return_state = false;
  r = RawCompose(*plain, stateless, state_first);
  CHECK(r.status() == StatusCode::kBadRequest);
  CHECK_MESSAGE(r.text().find("needs return_state") != std::string::npos, r.text());
  r = RawCompose(*plain, small_prompt, protocol::Bytes{std::byte{0}, std::byte{0}, std::byte{2}});
  CHECK(r.status() == StatusCode::kBadRequest);
  CHECK_MESSAGE(r.text().find("unknown state layout 2") != std::string::npos, r.text());
  // return_state in prefix mode.
  protocol::ComposeRequest prefix = big;
  prefix.mode = ComposeMode::kPrefix;
  r = RawCompose(*plain, prefix, {});
  CHECK(r.status() == StatusCode::kBadRequest);
  // A small state still fits one frame for this client.
  r = RawCompose(*plain, small_prompt, {});
  CHECK(r.status() == StatusCode::kOk);
  CHECK_FALSE(r.header.has_more());

  // With CHUNKED the big state streams in chunks of at most one frame; over max_message_bytes
  // it is refused.
  auto chunked = RawConn::Tcp((*d)->port());
  REQUIRE_OK(chunked);
  REQUIRE_OK(chunked->Hello("", "", protocol::kFeatureXxh3 | protocol::kFeatureChunked));
  REQUIRE_OK(chunked->SendFrame(
      [&] {
        protocol::FrameHeader h;
        h.opcode = Opcode::kCompose;
        h.request_id = chunked->next_id();
        return h;
      }(),
      {}, protocol::Encode(big)));
  protocol::Bytes body;
  int frames = 0;
  for (;;) {
    auto f = chunked->Read(60s);
    REQUIRE_OK(f);
    REQUIRE(f->status() == StatusCode::kOk);
    CHECK(f->body.size() <= (64u << 10));
    body.insert(body.end(), f->body.begin(), f->body.end());
    ++frames;
    if (!f->header.has_more()) break;
  }
  CHECK(frames > 2);
  auto reply = protocol::Decode<protocol::ComposeReply>(body);
  REQUIRE_OK(reply);
  auto tensors = protocol::DecodeTensorStream(reply->state);
  REQUIRE_OK(tensors);
  CHECK(tensors->size() == 8);  // 4 layers x 2 tensors
  protocol::ComposeRequest huge = big;
  huge.parts = {{protocol::PartKind::kRaw, {}, Range(5, 2100)}};  // ~1.05 MiB of f32 K/V
  r = RawCompose(*chunked, huge, {});
  CHECK(r.status() == StatusCode::kTooLarge);
  CHECK_MESSAGE(r.text().find("max_message_bytes") != std::string::npos, r.text());
  CHECK((*d)->Stop(SIGTERM) == 0);
}

// A COMPOSE whose ~1 MiB streamed state in `layout` the client never reads: the write deadline
// closes the connection and the compute worker is freed.
void CheckStalledStreamClosed(protocol::StateLayout layout) {
  DaemonOptions o;
  o.args = {"--idle-timeout-ms", "1500", "--compute-workers",    "1",
            "--log-level",       "info", "--request-timeout-ms", "120000"};
  auto d = Daemon::Start(o);
  REQUIRE_OK(d);
  // ~1 MiB of f32 state over the unix socket, whose buffers hold a few hundred KiB.
  protocol::ComposeRequest big = Prompt(ComposeMode::kFull);
  big.return_state = true;
  big.parts = {{protocol::PartKind::kRaw, {}, Range(5, 2000)}};
  auto stalled = RawConn::Unix((*d)->unix_path());
  REQUIRE_OK(stalled);
  int small = 4096;
  ::setsockopt(stalled->fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  REQUIRE_OK(stalled->Hello("", "", protocol::kFeatureXxh3 | protocol::kFeatureChunked));
  protocol::FrameHeader h;
  h.opcode = Opcode::kCompose;
  h.request_id = stalled->next_id();
  const protocol::Bytes ext = layout == protocol::StateLayout::kHeadFirst
                                  ? protocol::Bytes()
                                  : protocol::Encode(protocol::ComposeOptions{
                                        DType::kF32, protocol::LogitsMode::kTopK, layout});
  REQUIRE_OK(stalled->SendFrame(h, ext, protocol::Encode(big)));
  // Read nothing. The write deadline closes the connection, which frees the stream's buffers and
  // the compute worker (there is one): a later COMPOSE on another connection is answered.
  bool logged = false;
  for (int i = 0; i < 1200 && !logged; ++i) {  // up to 120 s (sanitizer builds compute slowly)
    std::this_thread::sleep_for(100ms);
    logged = (*d)->Log().find("write deadline passed") != std::string::npos;
  }
  CHECK_MESSAGE(logged, (*d)->Log());
  auto other = RawConn::Tcp((*d)->port());
  REQUIRE_OK(other);
  REQUIRE_OK(other->Hello());
  protocol::ComposeRequest quick = Prompt(ComposeMode::kFull);
  quick.return_state = false;
  ReplyFrame r = RawCompose(*other, quick, {});
  CHECK(r.status() == StatusCode::kOk);
  CHECK(stalled->WaitClosed(10s));
  int code = (*d)->Stop(SIGTERM);
  CHECK_MESSAGE(code == 0, (*d)->Log());
}

TEST_CASE("a client that stops reading mid-stream is closed by the write deadline") {
  // Head first the stream stalls after the compose; state first it stalls the compose itself
  // (each layer waits until the previous one is written), which must still end.
  SUBCASE("head first") { CheckStalledStreamClosed(protocol::StateLayout::kHeadFirst); }
  SUBCASE("state first") { CheckStalledStreamClosed(protocol::StateLayout::kStateFirst); }
}

}  // namespace
}  // namespace hypic::e2e

namespace hypic::e2e {
namespace {

TEST_CASE("StateFromTensors refuses a state that breaks the contract, naming the tensor") {
  auto m = model::LoadModel("builtin:tiny", ModelCacheDir());
  REQUIRE_OK(m);
  const model::Model& model = **m;
  auto full = model.FullPrefill(Range(1, 12));
  REQUIRE_OK(full);
  const model::ModelState& st = full->state;
  const model::ModelConfig& c = model.config();
  std::vector<model::StateTensorView> views;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    const auto& ls = st.layers[l];
    if (c.layer_kinds[l] == model::LayerKind::kLinear) {
      views.push_back({l, TensorKind::kState, DType::kF32,
                       Shape{c.linear_value_heads, c.linear_key_dim, c.linear_value_dim},
                       ls.state.data()});
      views.push_back({l, TensorKind::kConvTail, DType::kF32,
                       Shape{c.conv_kernel - 1, c.conv_channels()}, ls.conv.data()});
    } else {
      Shape kv{12, c.num_kv_heads, c.head_dim};
      views.push_back({l, TensorKind::kKey, DType::kF32, kv, ls.k.data()});
      views.push_back({l, TensorKind::kValue, DType::kF32, kv, ls.v.data()});
    }
  }
  auto ok = model.StateFromTensors(12, views);
  REQUIRE_OK(ok);
  CHECK(ok->layers[0].state == st.layers[0].state);
  CHECK(ok->layers[1].k == st.layers[1].k);
  auto expect = [&](std::vector<model::StateTensorView> v, int64_t n, const std::string& words) {
    auto r = model.StateFromTensors(n, v);
    CHECK(r.status().code() == StatusCode::kBadRequest);
    CHECK_MESSAGE(r.status().message().find(words) != std::string::npos, r.status().message());
  };
  expect({views.begin(), views.end() - 1}, 12, "layer 3 lacks");
  expect(views, 13, "the contract says");  // K/V cover 12 positions, not 13
  auto twice = views;
  twice.push_back(views[0]);
  expect(twice, 12, "given twice");
  auto wrong_kind = views;
  wrong_kind[0].kind = TensorKind::kKey;  // layer 0 is a linear layer
  expect(wrong_kind, 12, "not a tensor of a linear-attention layer");
  auto wrong_dtype = views;
  wrong_dtype[0].dtype = DType::kI32;
  expect(wrong_dtype, 12, "dtype I32");
  auto no_layer = views;
  no_layer[0].layer = 99;
  expect(no_layer, 12, "the model has 4 layers");
}

}  // namespace
}  // namespace hypic::e2e

namespace hypic::e2e {
namespace {

// Runs a shell command; its stdout and exit code.
std::pair<int, std::string> Shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

TEST_CASE("hypicctl compose --save-state, then hypic-op decode: the FullPrefill tokens") {
  if (::access(BinPath("hypicctl").c_str(), X_OK) != 0 ||
      ::access(BinPath("hypic-op").c_str(), X_OK) != 0) {
    MESSAGE("skipped: hypicctl or hypic-op is not built");
    return;
  }
  Fixture f;
  const std::string dir = f.daemon->data_dir();
  protocol::ComposeRequest req = Prompt(ComposeMode::kFull);
  {
    FILE* parts = std::fopen((dir + "/parts.jsonl").c_str(), "w");
    REQUIRE(parts != nullptr);
    for (const auto& p : req.parts) {
      std::string line = "[";
      for (size_t i = 0; i < p.tokens.size(); ++i) {
        line += (i ? "," : "") + std::to_string(p.tokens[i]);
      }
      std::fputs((line + "]\n").c_str(), parts);
    }
    std::fclose(parts);
  }
  const std::string addr = "--host 127.0.0.1 --port " + std::to_string(f.daemon->port());
  for (const std::string dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const std::string state = dir + "/state-" + dtype + ".safetensors";
    auto [rc, out] = Shell(BinPath("hypicctl") + " compose " + addr + " " + dir +
                           "/parts.jsonl --raw 0 --raw 3 --mode full --save-state " + state +
                           " --state-dtype " + dtype);
    REQUIRE_MESSAGE(rc == 0, out);
    auto [rc2, decoded] = Shell(BinPath("hypic-op") + " decode --model builtin:tiny --cache-dir " +
                                ModelCacheDir() + " --state " + state + " --tokens 16");
    REQUIRE_MESSAGE(rc2 == 0, decoded);
    auto j = nlohmann::json::parse(decoded, nullptr, false);
    REQUIRE_MESSAGE(!j.is_discarded(), decoded);
    CHECK(j["n_positions"] == f.prompt.size());
    if (dtype == "f32") CHECK(j["tokens"].get<std::vector<uint32_t>>() == f.reference.tokens);
    CHECK(j["tokens"].size() == 16);
  }
  // Another model's decoder refuses the file.
  auto [rc3, refused] = Shell(BinPath("hypic-op") + " decode --model builtin:small --cache-dir " +
                              ModelCacheDir() + " --state " + dir + "/state-f32.safetensors");
  CHECK(rc3 == 2);
  CHECK_MESSAGE(refused.find("computed by model") != std::string::npos, refused);
}

}  // namespace
}  // namespace hypic::e2e
