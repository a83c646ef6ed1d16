// Typed message bodies for every opcode (README "Messages"). Each struct encodes to exactly
// one byte string and decodes only that string (no trailing bytes, enums and booleans
// checked, every count capped and checked against the bytes left before anything is
// allocated), so Decode(Encode(m)) == m and Encode(Decode(b)) == b.
//
// Opcodes whose bodies are opaque are not structs here: the PING body (echoed), the GET reply
// and PUT request bodies (an entry's serialized bytes, storage/'s format), the STATS and
// CONFIG reply bodies (UTF-8 JSON), and error/GOAWAY bodies (a UTF-8 message).
// Value types; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/segment_entry.h"
#include "core/status.h"
#include "core/tensor.h"
#include "protocol/frame.h"

namespace hypic::protocol {

// Caps every decoder enforces (README "Limits").
inline constexpr uint32_t kMaxNameLen = 256;          // namespace, client and model names
inline constexpr uint32_t kMaxAuthTokenLen = 1024;    // auth and admin tokens
inline constexpr uint32_t kMaxVersionLen = 256;       // server version string
inline constexpr uint32_t kMaxHasKeys = 65536;        // keys in one HAS
inline constexpr uint32_t kMaxSegments = 4096;        // segments in one PREFILL
inline constexpr uint32_t kMaxParts = 4096;           // parts in one COMPOSE
inline constexpr uint32_t kMaxPartTokens = 1u << 20;  // tokens in one segment or raw part
inline constexpr uint32_t kMaxTopK = 1024;
inline constexpr uint32_t kMaxListEntries = 10000;     // entries in one LIST page
inline constexpr uint32_t kMaxVerifyBadKeys = 1024;    // bad keys reported by one VERIFY
inline constexpr uint32_t kMaxStreamTensors = 65536;   // tensors in one tensor stream
inline constexpr uint32_t kDefaultSeam = 0xFFFFFFFFu;  // "use the daemon's seam w"
inline constexpr uint32_t kMaxLogits = 1u << 24;       // a full logits row (the vocabulary)

// The version of the state contract (docs/state-format.md): what the tensors of a composed
// state mean (names, shapes, orientation, positions, RoPE, conv-tail order). Announced in the
// HELLO reply; a frontend refuses a version it does not know.
inline constexpr uint32_t kStateContractVersion = 1;

// Where an entry lives. Numeric values are wire values: never renumber.
enum class Tier : uint8_t { kNone = 0, kHbm = 1, kHost = 2, kSsd = 3 };
inline constexpr uint8_t kMaxTier = 3;
std::string_view TierName(Tier t);  // "none", "hbm", "host", "ssd"

// HELLO feature bits (u64). A peer ignores bits it does not know.
inline constexpr uint64_t kFeatureXxh3 = 1u << 0;         // accepts xxh3-64 body checksums
inline constexpr uint64_t kFeatureChunked = 1u << 1;      // accepts kFlagMore streams
inline constexpr uint64_t kFeatureStateInline = 1u << 2;  // COMPOSE can return the state
inline constexpr uint64_t kFeatureStateFirst = 1u << 3;   // COMPOSE takes StateLayout kStateFirst
// PREFILL can return the entries it prefilled (PrefillOptions::return_entries): what a router
// daemon needs of a peer it scatters segments to.
inline constexpr uint64_t kFeaturePrefillEntries = 1u << 4;

struct HelloRequest {
  uint16_t min_version = kMinVersion;
  uint16_t max_version = kMaxVersion;
  uint64_t features = 0;
  std::string client_name;
  std::string token;        // empty: none
  std::string admin_token;  // empty: no admin grant requested
  friend bool operator==(const HelloRequest&, const HelloRequest&) = default;
};

struct ServerLimits {
  uint64_t max_frame_body = 0;     // body_len cap of one frame
  uint64_t max_message_bytes = 0;  // cap of a whole (possibly chunked) message
  uint32_t max_inflight_requests = 0;
  uint64_t max_inflight_bytes = 0;
  uint32_t max_keys = 0;   // per HAS
  uint32_t max_parts = 0;  // per COMPOSE / PREFILL
  friend bool operator==(const ServerLimits&, const ServerLimits&) = default;
};

struct HelloReply {
  uint16_t version = 0;  // the negotiated version: every later frame carries it
  uint64_t features = 0;
  std::string server_version;  // "hypicd 0.1.0"
  Hash128 model_fingerprint;
  std::string model_name;
  uint32_t seam_w = 0;          // the daemon's default seam window
  uint32_t format_version = 0;  // entry format version (part of every key)
  ServerLimits limits;
  bool admin = false;  // whether admin opcodes are granted on this connection
  uint32_t state_contract = kStateContractVersion;  // docs/state-format.md
  friend bool operator==(const HelloReply&, const HelloReply&) = default;
};

struct HasRequest {
  std::vector<Hash128> keys;
  friend bool operator==(const HasRequest&, const HasRequest&) = default;
};
struct HasReply {
  std::vector<Tier> tiers;  // one per requested key, kNone for a miss
  friend bool operator==(const HasReply&, const HasReply&) = default;
};

// GET reply ext: where the entry was served from.
struct GetInfo {
  Tier tier = Tier::kNone;
  friend bool operator==(const GetInfo&, const GetInfo&) = default;
};

// PUT request ext (empty ext = defaults).
struct PutOptions {
  uint32_t ttl_s = 0;  // 0: no TTL
  bool pin = false;
  friend bool operator==(const PutOptions&, const PutOptions&) = default;
};

struct Timings {
  uint64_t probe_us = 0;
  uint64_t prefill_us = 0;   // miss prefill (wall time of the parallel scatter)
  uint64_t transfer_us = 0;  // moving entries between tiers/devices
  uint64_t compose_us = 0;
  uint64_t total_us = 0;
  friend bool operator==(const Timings&, const Timings&) = default;
};

struct PrefillRequest {
  std::string name_space;
  uint32_t seam_w = kDefaultSeam;
  std::vector<std::vector<uint32_t>> segments;
  friend bool operator==(const PrefillRequest&, const PrefillRequest&) = default;
};

// PREFILL request ext (empty ext = defaults).
struct PrefillOptions {
  // Append each result's serialized entry to the reply (a peer daemon computing for a router);
  // the segments are then computed on the daemon's own workers only, never forwarded to its
  // peers.
  bool return_entries = false;
  friend bool operator==(const PrefillOptions&, const PrefillOptions&) = default;
};

struct PrefillResult {
  Hash128 key;
  bool was_cached = false;  // true: a hit, nothing computed
  Tier tier = Tier::kNone;  // where the entry is now
  uint32_t n_tokens = 0;
  uint64_t bytes = 0;  // serialized entry size
  friend bool operator==(const PrefillResult&, const PrefillResult&) = default;
};
struct PrefillReply {
  std::vector<PrefillResult> results;  // in request order
  Timings timings;
  friend bool operator==(const PrefillReply&, const PrefillReply&) = default;
};

enum class ComposeMode : uint8_t {
  kFull = 0,    // recompute everything (the reference)
  kNaive = 1,   // add states, concatenate K/V (wrong on purpose, for comparison)
  kHypic = 2,   // transition operators + seam windows
  kOracle = 3,  // segments prefilled in their true context
  kPrefix = 4,  // a prefix cache: reuse only the longest cached prefix
};
inline constexpr uint8_t kMaxComposeMode = 4;
std::string_view ComposeModeName(ComposeMode m);

enum class PartKind : uint8_t {
  kSegmentTokens = 0,  // a cacheable segment given by its tokens
  kSegmentKey = 1,     // a cached segment named by its key (NOT_FOUND if absent)
  kRaw = 2,            // live tokens, never cached (a prefix, a question, a suffix)
};
inline constexpr uint8_t kMaxPartKind = 2;

struct ComposePart {
  PartKind kind = PartKind::kSegmentTokens;
  Hash128 key;                   // kSegmentKey only
  std::vector<uint32_t> tokens;  // kSegmentTokens and kRaw only
  friend bool operator==(const ComposePart&, const ComposePart&) = default;
};

struct ComposeRequest {
  std::string name_space;
  ComposeMode mode = ComposeMode::kHypic;
  uint32_t seam_w = kDefaultSeam;
  uint32_t top_k = 0;
  bool return_state = false;  // append the composed state as a tensor stream
  std::vector<ComposePart> parts;
  friend bool operator==(const ComposeRequest&, const ComposeRequest&) = default;
};

// What the COMPOSE reply carries of the last token's logits.
enum class LogitsMode : uint8_t {
  kTopK = 0,  // the request's top_k (token, logit) pairs only
  kFull = 1,  // also the whole vocabulary row, in f32
};
inline constexpr uint8_t kMaxLogitsMode = 1;

// Where a COMPOSE reply that returns the state puts it (README §4, §5.2).
enum class StateLayout : uint8_t {
  // The head (parts, timings, logits), then the tensor stream: the state leaves once the
  // compose has finished.
  kHeadFirst = 0,
  // The tensor stream, then the head: each layer leaves as soon as the compose has it, the
  // head (whose logits come last) ends the reply. Needs CHUNKED and return_state.
  kStateFirst = 1,
};
inline constexpr uint8_t kMaxStateLayout = 1;

// COMPOSE request ext (empty ext = the defaults): how the reply encodes what it returns. The
// layout byte is written only when it is not kHeadFirst, so a daemon that predates it (and
// rejects a third byte) still takes every ext that asks for the head-first layout.
struct ComposeOptions {
  DType state_dtype = DType::kF32;  // the state's tensors: kF32, kBF16 or kF16 (server-checked)
  LogitsMode logits = LogitsMode::kTopK;
  StateLayout state_layout = StateLayout::kHeadFirst;
  friend bool operator==(const ComposeOptions&, const ComposeOptions&) = default;
};

enum class PartOutcome : uint8_t { kHit = 0, kMiss = 1, kLive = 2 };
inline constexpr uint8_t kMaxPartOutcome = 2;

struct PartResult {
  PartOutcome outcome = PartOutcome::kLive;
  Tier tier = Tier::kNone;  // hit: the tier it came from; miss: where it was stored
  uint32_t n_tokens = 0;
  Hash128 key;  // zero for kLive
  friend bool operator==(const PartResult&, const PartResult&) = default;
};

struct TopLogit {
  uint32_t token = 0;
  float logit = 0.0f;
  friend bool operator==(const TopLogit&, const TopLogit&) = default;
};

struct ComposeReply {
  std::vector<PartResult> parts;
  Timings timings;
  uint32_t n_tokens = 0;      // total prompt length
  std::vector<TopLogit> top;  // descending logit
  std::vector<float> logits;  // the whole last-token row with LogitsMode::kFull, else empty
  bool has_state = false;
  Bytes state;  // a tensor stream (EncodeTensorStream) when has_state
  friend bool operator==(const ComposeReply&, const ComposeReply&) = default;
};

enum class EvictBy : uint8_t {
  kKey = 0,        // `key`
  kNamespace = 1,  // every entry of `name_space`
  kTier = 2,       // every entry in `tier` (demoted where a lower tier admits it)
  kBytes = 3,      // at least `bytes` by the eviction policy, from `tier` (kNone: any)
  kAll = 4,
};
inline constexpr uint8_t kMaxEvictBy = 4;

struct EvictRequest {
  EvictBy by = EvictBy::kKey;
  Hash128 key;
  std::string name_space;
  Tier tier = Tier::kNone;
  uint64_t bytes = 0;
  friend bool operator==(const EvictRequest&, const EvictRequest&) = default;
};
struct EvictReply {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  friend bool operator==(const EvictReply&, const EvictReply&) = default;
};

struct ListRequest {
  uint64_t cursor = 0;  // 0: from the start; else a ListReply's next_cursor
  uint32_t limit = 100;
  std::string name_space;   // empty: every namespace
  Tier tier = Tier::kNone;  // kNone: every tier
  friend bool operator==(const ListRequest&, const ListRequest&) = default;
};
struct ListEntry {
  Hash128 key;
  Tier tier = Tier::kNone;
  std::string name_space;
  uint32_t n_tokens = 0;
  uint64_t bytes = 0;
  uint64_t hits = 0;
  uint64_t last_access_ms = 0;  // unix time
  uint32_t pins = 0;
  uint32_t ttl_s = 0;  // 0: none
  friend bool operator==(const ListEntry&, const ListEntry&) = default;
};
struct ListReply {
  uint64_t next_cursor = 0;  // 0: no more pages
  std::vector<ListEntry> entries;
  friend bool operator==(const ListReply&, const ListReply&) = default;
};

struct VerifyReply {
  uint64_t checked = 0;
  uint64_t bad = 0;
  std::vector<Hash128> bad_keys;  // at most kMaxVerifyBadKeys
  friend bool operator==(const VerifyReply&, const VerifyReply&) = default;
};

// Encode/Decode pairs. Decode fails with kBadRequest (malformed) or kTooLarge (over a cap).
Bytes Encode(const HelloRequest& m);
Bytes Encode(const HelloReply& m);
Bytes Encode(const HasRequest& m);
Bytes Encode(const HasReply& m);
Bytes Encode(const GetInfo& m);
Bytes Encode(const PutOptions& m);
Bytes Encode(const PrefillRequest& m);
Bytes Encode(const PrefillOptions& m);
Bytes Encode(const PrefillReply& m);
Bytes Encode(const ComposeRequest& m);
Bytes Encode(const ComposeOptions& m);
Bytes Encode(const ComposeReply& m);
Bytes Encode(const EvictRequest& m);
Bytes Encode(const EvictReply& m);
Bytes Encode(const ListRequest& m);
Bytes Encode(const ListReply& m);
Bytes Encode(const VerifyReply& m);

template <typename T>
Result<T> Decode(ByteSpan bytes);

// PrefillOptions from a PREFILL ext: empty ext means the defaults.
Result<PrefillOptions> DecodePrefillOptions(ByteSpan ext);

// The body of a PREFILL reply with return_entries: the PrefillReply, then each result's entry
// (results[i].bytes bytes, docs/entry-format.md) in result order. `entries` view into the body.
struct PrefillEntriesReply {
  PrefillReply reply;
  std::vector<ByteSpan> entries;
};
// The head's size in bytes for `n_results` results (where the first entry starts).
size_t PrefillReplyHeadSize(uint32_t n_results);
// kBadRequest/kTooLarge as Decode<PrefillReply> for the head, and kBadRequest unless the rest of
// the body is exactly the entries' declared bytes. The entries themselves are not parsed.
Result<PrefillEntriesReply> DecodePrefillEntriesReply(ByteSpan body);

// PutOptions from a PUT ext: empty ext means the defaults.
Result<PutOptions> DecodePutOptions(ByteSpan ext);
// ComposeOptions from a COMPOSE ext: empty ext means the defaults. Any DType value decodes;
// the server answers BAD_REQUEST for one it cannot encode a state in.
Result<ComposeOptions> DecodeComposeOptions(ByteSpan ext);

// The length of the head of a COMPOSE reply body (everything before the tensor stream) when
// `bytes` holds all of it; nullopt when more bytes are needed; kBadRequest/kTooLarge when the
// counts are invalid. A receiver of a streamed reply decodes the head with Decode<ComposeReply>
// over those bytes (has_state then true with an empty `state`) and the rest with a
// TensorStreamParser (protocol/tensor_stream_parser.h).
Result<std::optional<size_t>> ComposeReplyHeadSize(ByteSpan bytes);

// A whole COMPOSE reply body in `layout`. kHeadFirst is Decode<ComposeReply>. kStateFirst is
// a tensor stream followed by the head, whose has_state must be true: decoded into the same
// ComposeReply (`state` = the stream's bytes). kBadRequest/kTooLarge when malformed.
Result<ComposeReply> DecodeComposeReply(ByteSpan body, StateLayout layout);

// The tensor stream: the composed state (README "Tensor stream"). Tensors are views into the
// decoded bytes, which must outlive them.
struct StreamTensor {
  uint32_t layer = 0;
  TensorKind kind = TensorKind::kState;
  DType dtype = DType::kF32;
  Shape shape;
  ByteSpan data;  // numel * DTypeSize(dtype) bytes, row-major, little-endian
};
// REQUIRES: every data.size() matches its shape and dtype (checked: kBadRequest otherwise).
Result<Bytes> EncodeTensorStream(std::span<const StreamTensor> tensors);
Result<std::vector<StreamTensor>> DecodeTensorStream(ByteSpan bytes);

}  // namespace hypic::protocol
