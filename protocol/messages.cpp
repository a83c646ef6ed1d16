#include "protocol/messages.h"

#include <array>
#include <cstring>

#include "protocol/wire_codec.h"

namespace hypic::protocol {

namespace {

template <typename E>
Status ReadEnum(WireReader& r, E* out, uint8_t max, std::string_view what) {
  uint8_t v = 0;
  HYPIC_RETURN_IF_ERROR(r.U8(&v));
  if (v > max) return BadRequest("unknown " + std::string(what) + " " + std::to_string(v));
  *out = static_cast<E>(v);
  return Status::Ok();
}

template <typename E>
void WriteEnum(WireWriter& w, E e) {
  w.U8(static_cast<uint8_t>(e));
}

void WriteTokens(WireWriter& w, const std::vector<uint32_t>& tokens) {
  w.U32(static_cast<uint32_t>(tokens.size()));
  w.Raw(tokens.data(), tokens.size() * 4);
}

Status ReadTokens(WireReader& r, std::vector<uint32_t>* tokens) {
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxPartTokens, 4, "tokens"));
  ByteSpan v;
  HYPIC_RETURN_IF_ERROR(r.View(size_t{n} * 4, &v, "tokens"));
  tokens->resize(n);
  if (n > 0) std::memcpy(tokens->data(), v.data(), v.size());
  return Status::Ok();
}

void WriteTimings(WireWriter& w, const Timings& t) {
  w.U64(t.probe_us);
  w.U64(t.prefill_us);
  w.U64(t.transfer_us);
  w.U64(t.compose_us);
  w.U64(t.total_us);
}

Status ReadTimings(WireReader& r, Timings* t) {
  HYPIC_RETURN_IF_ERROR(r.U64(&t->probe_us));
  HYPIC_RETURN_IF_ERROR(r.U64(&t->prefill_us));
  HYPIC_RETURN_IF_ERROR(r.U64(&t->transfer_us));
  HYPIC_RETURN_IF_ERROR(r.U64(&t->compose_us));
  return r.U64(&t->total_us);
}

// Shape has no rank setter: build it from an initializer list of the right length.
Shape MakeShape(uint8_t rank, const std::array<int64_t, kMaxRank>& d) {
  switch (rank) {
    case 0: return Shape();
    case 1: return Shape({d[0]});
    case 2: return Shape({d[0], d[1]});
    case 3: return Shape({d[0], d[1], d[2]});
    case 4: return Shape({d[0], d[1], d[2], d[3]});
    case 5: return Shape({d[0], d[1], d[2], d[3], d[4]});
    default: return Shape({d[0], d[1], d[2], d[3], d[4], d[5]});
  }
}

template <typename T, typename Fn>
Bytes EncodeWith(const T& m, Fn fn) {
  Bytes out;
  WireWriter w(&out);
  fn(w, m);
  return out;
}

}  // namespace

std::string_view TierName(Tier t) {
  switch (t) {
    case Tier::kNone: return "none";
    case Tier::kHbm: return "hbm";
    case Tier::kHost: return "host";
    case Tier::kSsd: return "ssd";
  }
  return "unknown";
}

std::string_view ComposeModeName(ComposeMode m) {
  switch (m) {
    case ComposeMode::kFull: return "full";
    case ComposeMode::kNaive: return "naive";
    case ComposeMode::kHypic: return "hypic";
    case ComposeMode::kOracle: return "oracle";
    case ComposeMode::kPrefix: return "prefix";
  }
  return "unknown";
}

// ---- HELLO ----

Bytes Encode(const HelloRequest& m) {
  return EncodeWith(m, [](WireWriter& w, const HelloRequest& x) {
    w.U16(x.min_version);
    w.U16(x.max_version);
    w.U64(x.features);
    w.String(x.client_name);
    w.String(x.token);
    w.String(x.admin_token);
  });
}

template <>
Result<HelloRequest> Decode<HelloRequest>(ByteSpan bytes) {
  WireReader r(bytes);
  HelloRequest m;
  HYPIC_RETURN_IF_ERROR(r.U16(&m.min_version));
  HYPIC_RETURN_IF_ERROR(r.U16(&m.max_version));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.features));
  HYPIC_RETURN_IF_ERROR(r.String(&m.client_name, kMaxNameLen, "client name"));
  HYPIC_RETURN_IF_ERROR(r.String(&m.token, kMaxAuthTokenLen, "token"));
  HYPIC_RETURN_IF_ERROR(r.String(&m.admin_token, kMaxAuthTokenLen, "admin token"));
  if (m.min_version > m.max_version) {
    return BadRequest("HELLO min_version " + std::to_string(m.min_version) + " > max_version " +
                      std::to_string(m.max_version));
  }
  HYPIC_RETURN_IF_ERROR(r.Finish("HELLO"));
  return m;
}

Bytes Encode(const HelloReply& m) {
  return EncodeWith(m, [](WireWriter& w, const HelloReply& x) {
    w.U16(x.version);
    w.U64(x.features);
    w.String(x.server_version);
    w.Key(x.model_fingerprint);
    w.String(x.model_name);
    w.U32(x.seam_w);
    w.U32(x.format_version);
    w.U64(x.limits.max_frame_body);
    w.U64(x.limits.max_message_bytes);
    w.U32(x.limits.max_inflight_requests);
    w.U64(x.limits.max_inflight_bytes);
    w.U32(x.limits.max_keys);
    w.U32(x.limits.max_parts);
    w.U8(x.admin ? 1 : 0);
    w.U32(x.state_contract);
  });
}

template <>
Result<HelloReply> Decode<HelloReply>(ByteSpan bytes) {
  WireReader r(bytes);
  HelloReply m;
  HYPIC_RETURN_IF_ERROR(r.U16(&m.version));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.features));
  HYPIC_RETURN_IF_ERROR(r.String(&m.server_version, kMaxVersionLen, "server version"));
  HYPIC_RETURN_IF_ERROR(r.Key(&m.model_fingerprint));
  HYPIC_RETURN_IF_ERROR(r.String(&m.model_name, kMaxNameLen, "model name"));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.seam_w));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.format_version));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.limits.max_frame_body));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.limits.max_message_bytes));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.limits.max_inflight_requests));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.limits.max_inflight_bytes));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.limits.max_keys));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.limits.max_parts));
  HYPIC_RETURN_IF_ERROR(r.Bool(&m.admin));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.state_contract));
  HYPIC_RETURN_IF_ERROR(r.Finish("HELLO reply"));
  return m;
}

// ---- HAS ----

Bytes Encode(const HasRequest& m) {
  return EncodeWith(m, [](WireWriter& w, const HasRequest& x) {
    w.U32(static_cast<uint32_t>(x.keys.size()));
    for (const auto& k : x.keys) w.Key(k);
  });
}

template <>
Result<HasRequest> Decode<HasRequest>(ByteSpan bytes) {
  WireReader r(bytes);
  HasRequest m;
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxHasKeys, 16, "HAS keys"));
  m.keys.resize(n);
  for (auto& k : m.keys) HYPIC_RETURN_IF_ERROR(r.Key(&k));
  HYPIC_RETURN_IF_ERROR(r.Finish("HAS"));
  return m;
}

Bytes Encode(const HasReply& m) {
  return EncodeWith(m, [](WireWriter& w, const HasReply& x) {
    w.U32(static_cast<uint32_t>(x.tiers.size()));
    for (Tier t : x.tiers) WriteEnum(w, t);
  });
}

template <>
Result<HasReply> Decode<HasReply>(ByteSpan bytes) {
  WireReader r(bytes);
  HasReply m;
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxHasKeys, 1, "HAS tiers"));
  m.tiers.resize(n);
  for (auto& t : m.tiers) HYPIC_RETURN_IF_ERROR(ReadEnum(r, &t, kMaxTier, "tier"));
  HYPIC_RETURN_IF_ERROR(r.Finish("HAS reply"));
  return m;
}

// ---- GET / PUT ext ----

Bytes Encode(const GetInfo& m) {
  return EncodeWith(m, [](WireWriter& w, const GetInfo& x) { WriteEnum(w, x.tier); });
}

template <>
Result<GetInfo> Decode<GetInfo>(ByteSpan bytes) {
  WireReader r(bytes);
  GetInfo m;
  HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.tier, kMaxTier, "tier"));
  HYPIC_RETURN_IF_ERROR(r.Finish("GET info"));
  return m;
}

Bytes Encode(const PutOptions& m) {
  return EncodeWith(m, [](WireWriter& w, const PutOptions& x) {
    w.U32(x.ttl_s);
    w.U8(x.pin ? 1 : 0);
  });
}

template <>
Result<PutOptions> Decode<PutOptions>(ByteSpan bytes) {
  WireReader r(bytes);
  PutOptions m;
  HYPIC_RETURN_IF_ERROR(r.U32(&m.ttl_s));
  HYPIC_RETURN_IF_ERROR(r.Bool(&m.pin));
  HYPIC_RETURN_IF_ERROR(r.Finish("PUT options"));
  return m;
}

Result<PutOptions> DecodePutOptions(ByteSpan ext) {
  if (ext.empty()) return PutOptions{};
  return Decode<PutOptions>(ext);
}

// ---- PREFILL ----

Bytes Encode(const PrefillRequest& m) {
  return EncodeWith(m, [](WireWriter& w, const PrefillRequest& x) {
    w.String(x.name_space);
    w.U32(x.seam_w);
    w.U32(static_cast<uint32_t>(x.segments.size()));
    for (const auto& s : x.segments) WriteTokens(w, s);
  });
}

template <>
Result<PrefillRequest> Decode<PrefillRequest>(ByteSpan bytes) {
  WireReader r(bytes);
  PrefillRequest m;
  HYPIC_RETURN_IF_ERROR(r.String(&m.name_space, kMaxNameLen, "namespace"));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.seam_w));
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxSegments, 4, "PREFILL segments"));
  m.segments.resize(n);
  for (auto& s : m.segments) HYPIC_RETURN_IF_ERROR(ReadTokens(r, &s));
  HYPIC_RETURN_IF_ERROR(r.Finish("PREFILL"));
  return m;
}

Bytes Encode(const PrefillReply& m) {
  return EncodeWith(m, [](WireWriter& w, const PrefillReply& x) {
    w.U32(static_cast<uint32_t>(x.results.size()));
    for (const auto& p : x.results) {
      w.Key(p.key);
      w.U8(p.was_cached ? 1 : 0);
      WriteEnum(w, p.tier);
      w.U32(p.n_tokens);
      w.U64(p.bytes);
    }
    WriteTimings(w, x.timings);
  });
}

template <>
Result<PrefillReply> Decode<PrefillReply>(ByteSpan bytes) {
  WireReader r(bytes);
  PrefillReply m;
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxSegments, 30, "PREFILL results"));
  m.results.resize(n);
  for (auto& p : m.results) {
    HYPIC_RETURN_IF_ERROR(r.Key(&p.key));
    HYPIC_RETURN_IF_ERROR(r.Bool(&p.was_cached));
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &p.tier, kMaxTier, "tier"));
    HYPIC_RETURN_IF_ERROR(r.U32(&p.n_tokens));
    HYPIC_RETURN_IF_ERROR(r.U64(&p.bytes));
  }
  HYPIC_RETURN_IF_ERROR(ReadTimings(r, &m.timings));
  HYPIC_RETURN_IF_ERROR(r.Finish("PREFILL reply"));
  return m;
}

Bytes Encode(const PrefillOptions& m) {
  return EncodeWith(m,
                    [](WireWriter& w, const PrefillOptions& x) { w.U8(x.return_entries ? 1 : 0); });
}

template <>
Result<PrefillOptions> Decode<PrefillOptions>(ByteSpan bytes) {
  WireReader r(bytes);
  PrefillOptions m;
  HYPIC_RETURN_IF_ERROR(r.Bool(&m.return_entries));
  HYPIC_RETURN_IF_ERROR(r.Finish("PREFILL options"));
  return m;
}

Result<PrefillOptions> DecodePrefillOptions(ByteSpan ext) {
  if (ext.empty()) return PrefillOptions{};
  return Decode<PrefillOptions>(ext);
}

size_t PrefillReplyHeadSize(uint32_t n_results) { return 4 + size_t{n_results} * 30 + 40; }

Result<PrefillEntriesReply> DecodePrefillEntriesReply(ByteSpan body) {
  WireReader counts(body);
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(counts.Count(&n, kMaxSegments, 30, "PREFILL results"));
  const size_t head = PrefillReplyHeadSize(n);
  if (body.size() < head) return BadRequest("PREFILL reply: truncated results");
  PrefillEntriesReply out;
  HYPIC_ASSIGN_OR_RETURN(out.reply, Decode<PrefillReply>(body.first(head)));
  WireReader r(body.subspan(head));
  for (const PrefillResult& p : out.reply.results) {
    ByteSpan entry;
    if (p.bytes > r.remaining()) return BadRequest("PREFILL reply: an entry is truncated");
    HYPIC_RETURN_IF_ERROR(r.View(static_cast<size_t>(p.bytes), &entry, "PREFILL entry"));
    out.entries.push_back(entry);
  }
  HYPIC_RETURN_IF_ERROR(r.Finish("PREFILL reply entries"));
  return out;
}

// ---- COMPOSE ----

Bytes Encode(const ComposeRequest& m) {
  return EncodeWith(m, [](WireWriter& w, const ComposeRequest& x) {
    w.String(x.name_space);
    WriteEnum(w, x.mode);
    w.U32(x.seam_w);
    w.U32(x.top_k);
    w.U8(x.return_state ? 1 : 0);
    w.U32(static_cast<uint32_t>(x.parts.size()));
    for (const auto& p : x.parts) {
      WriteEnum(w, p.kind);
      if (p.kind == PartKind::kSegmentKey) {
        w.Key(p.key);
      } else {
        WriteTokens(w, p.tokens);
      }
    }
  });
}

template <>
Result<ComposeRequest> Decode<ComposeRequest>(ByteSpan bytes) {
  WireReader r(bytes);
  ComposeRequest m;
  HYPIC_RETURN_IF_ERROR(r.String(&m.name_space, kMaxNameLen, "namespace"));
  HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.mode, kMaxComposeMode, "compose mode"));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.seam_w));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.top_k));
  if (m.top_k > kMaxTopK) {
    return TooLarge("top_k " + std::to_string(m.top_k) + " exceeds " + std::to_string(kMaxTopK));
  }
  HYPIC_RETURN_IF_ERROR(r.Bool(&m.return_state));
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxParts, 5, "COMPOSE parts"));
  m.parts.resize(n);
  for (auto& p : m.parts) {
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &p.kind, kMaxPartKind, "part kind"));
    if (p.kind == PartKind::kSegmentKey) {
      HYPIC_RETURN_IF_ERROR(r.Key(&p.key));
    } else {
      HYPIC_RETURN_IF_ERROR(ReadTokens(r, &p.tokens));
    }
  }
  HYPIC_RETURN_IF_ERROR(r.Finish("COMPOSE"));
  return m;
}

Bytes Encode(const ComposeReply& m) {
  return EncodeWith(m, [](WireWriter& w, const ComposeReply& x) {
    w.U32(static_cast<uint32_t>(x.parts.size()));
    for (const auto& p : x.parts) {
      WriteEnum(w, p.outcome);
      WriteEnum(w, p.tier);
      w.U32(p.n_tokens);
      w.Key(p.key);
    }
    WriteTimings(w, x.timings);
    w.U32(x.n_tokens);
    w.U32(static_cast<uint32_t>(x.top.size()));
    for (const auto& t : x.top) {
      w.U32(t.token);
      w.F32(t.logit);
    }
    w.U32(static_cast<uint32_t>(x.logits.size()));
    w.Raw(x.logits.data(), x.logits.size() * 4);
    w.U8(x.has_state ? 1 : 0);
    // The tensor stream is the rest of the body (no length prefix), so a receiver can hand
    // the tail of a chunked reply to the tensor-stream parser as it arrives.
    if (x.has_state) w.Raw(x.state.data(), x.state.size());
  });
}

template <>
Result<ComposeReply> Decode<ComposeReply>(ByteSpan bytes) {
  WireReader r(bytes);
  ComposeReply m;
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxParts, 22, "COMPOSE part results"));
  m.parts.resize(n);
  for (auto& p : m.parts) {
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &p.outcome, kMaxPartOutcome, "part outcome"));
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &p.tier, kMaxTier, "tier"));
    HYPIC_RETURN_IF_ERROR(r.U32(&p.n_tokens));
    HYPIC_RETURN_IF_ERROR(r.Key(&p.key));
  }
  HYPIC_RETURN_IF_ERROR(ReadTimings(r, &m.timings));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.n_tokens));
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxTopK, 8, "top logits"));
  m.top.resize(n);
  for (auto& t : m.top) {
    HYPIC_RETURN_IF_ERROR(r.U32(&t.token));
    HYPIC_RETURN_IF_ERROR(r.F32(&t.logit));
  }
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxLogits, 4, "logits"));
  ByteSpan row;
  HYPIC_RETURN_IF_ERROR(r.View(size_t{n} * 4, &row, "logits"));
  m.logits.resize(n);
  if (n > 0) std::memcpy(m.logits.data(), row.data(), row.size());
  HYPIC_RETURN_IF_ERROR(r.Bool(&m.has_state));
  if (m.has_state) {
    ByteSpan state;
    HYPIC_RETURN_IF_ERROR(r.View(r.remaining(), &state, "state"));
    m.state.assign(state.begin(), state.end());
  }
  HYPIC_RETURN_IF_ERROR(r.Finish("COMPOSE reply"));
  return m;
}

Bytes Encode(const ComposeOptions& m) {
  return EncodeWith(m, [](WireWriter& w, const ComposeOptions& x) {
    WriteEnum(w, x.state_dtype);
    WriteEnum(w, x.logits);
    if (x.state_layout != StateLayout::kHeadFirst) WriteEnum(w, x.state_layout);
  });
}

template <>
Result<ComposeOptions> Decode<ComposeOptions>(ByteSpan bytes) {
  WireReader r(bytes);
  ComposeOptions m;
  HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.state_dtype, kMaxDType, "state dtype"));
  HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.logits, kMaxLogitsMode, "logits mode"));
  if (r.remaining() > 0) {
    // Present only when not the default, so each options value has one encoding.
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.state_layout, kMaxStateLayout, "state layout"));
    if (m.state_layout == StateLayout::kHeadFirst) {
      return BadRequest("COMPOSE options: the head-first state layout is sent as two bytes");
    }
  }
  HYPIC_RETURN_IF_ERROR(r.Finish("COMPOSE options"));
  return m;
}

Result<ComposeOptions> DecodeComposeOptions(ByteSpan ext) {
  if (ext.empty()) return ComposeOptions{};
  return Decode<ComposeOptions>(ext);
}

Result<std::optional<size_t>> ComposeReplyHeadSize(ByteSpan bytes) {
  // The head's variable parts are three counted arrays at offsets the earlier counts fix.
  auto count_at = [&](size_t at, uint32_t* n) {
    if (bytes.size() < at + 4) return false;
    std::memcpy(n, bytes.data() + at, 4);
    return true;
  };
  uint32_t parts = 0, top = 0, logits = 0;
  if (!count_at(0, &parts)) return std::optional<size_t>();
  if (parts > kMaxParts) return TooLarge("COMPOSE reply: too many part results");
  size_t at = 4 + size_t{parts} * 22 + 40 + 4;  // part results, timings, n_tokens
  if (!count_at(at, &top)) return std::optional<size_t>();
  if (top > kMaxTopK) return TooLarge("COMPOSE reply: too many top logits");
  at += 4 + size_t{top} * 8;
  if (!count_at(at, &logits)) return std::optional<size_t>();
  if (logits > kMaxLogits) return TooLarge("COMPOSE reply: logits row too long");
  at += 4 + size_t{logits} * 4 + 1;  // the row, has_state
  if (bytes.size() < at) return std::optional<size_t>();
  return std::optional<size_t>(at);
}

// ---- EVICT ----

Bytes Encode(const EvictRequest& m) {
  return EncodeWith(m, [](WireWriter& w, const EvictRequest& x) {
    WriteEnum(w, x.by);
    w.Key(x.key);
    w.String(x.name_space);
    WriteEnum(w, x.tier);
    w.U64(x.bytes);
  });
}

template <>
Result<EvictRequest> Decode<EvictRequest>(ByteSpan bytes) {
  WireReader r(bytes);
  EvictRequest m;
  HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.by, kMaxEvictBy, "evict selector"));
  HYPIC_RETURN_IF_ERROR(r.Key(&m.key));
  HYPIC_RETURN_IF_ERROR(r.String(&m.name_space, kMaxNameLen, "namespace"));
  HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.tier, kMaxTier, "tier"));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.bytes));
  HYPIC_RETURN_IF_ERROR(r.Finish("EVICT"));
  return m;
}

Bytes Encode(const EvictReply& m) {
  return EncodeWith(m, [](WireWriter& w, const EvictReply& x) {
    w.U64(x.entries);
    w.U64(x.bytes);
  });
}

template <>
Result<EvictReply> Decode<EvictReply>(ByteSpan bytes) {
  WireReader r(bytes);
  EvictReply m;
  HYPIC_RETURN_IF_ERROR(r.U64(&m.entries));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.bytes));
  HYPIC_RETURN_IF_ERROR(r.Finish("EVICT reply"));
  return m;
}

// ---- LIST ----

Bytes Encode(const ListRequest& m) {
  return EncodeWith(m, [](WireWriter& w, const ListRequest& x) {
    w.U64(x.cursor);
    w.U32(x.limit);
    w.String(x.name_space);
    WriteEnum(w, x.tier);
  });
}

template <>
Result<ListRequest> Decode<ListRequest>(ByteSpan bytes) {
  WireReader r(bytes);
  ListRequest m;
  HYPIC_RETURN_IF_ERROR(r.U64(&m.cursor));
  HYPIC_RETURN_IF_ERROR(r.U32(&m.limit));
  if (m.limit > kMaxListEntries) {
    return TooLarge("LIST limit " + std::to_string(m.limit) + " exceeds " +
                    std::to_string(kMaxListEntries));
  }
  HYPIC_RETURN_IF_ERROR(r.String(&m.name_space, kMaxNameLen, "namespace"));
  HYPIC_RETURN_IF_ERROR(ReadEnum(r, &m.tier, kMaxTier, "tier"));
  HYPIC_RETURN_IF_ERROR(r.Finish("LIST"));
  return m;
}

Bytes Encode(const ListReply& m) {
  return EncodeWith(m, [](WireWriter& w, const ListReply& x) {
    w.U64(x.next_cursor);
    w.U32(static_cast<uint32_t>(x.entries.size()));
    for (const auto& e : x.entries) {
      w.Key(e.key);
      WriteEnum(w, e.tier);
      w.String(e.name_space);
      w.U32(e.n_tokens);
      w.U64(e.bytes);
      w.U64(e.hits);
      w.U64(e.last_access_ms);
      w.U32(e.pins);
      w.U32(e.ttl_s);
    }
  });
}

template <>
Result<ListReply> Decode<ListReply>(ByteSpan bytes) {
  WireReader r(bytes);
  ListReply m;
  HYPIC_RETURN_IF_ERROR(r.U64(&m.next_cursor));
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxListEntries, 57, "LIST entries"));
  m.entries.resize(n);
  for (auto& e : m.entries) {
    HYPIC_RETURN_IF_ERROR(r.Key(&e.key));
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &e.tier, kMaxTier, "tier"));
    HYPIC_RETURN_IF_ERROR(r.String(&e.name_space, kMaxNameLen, "namespace"));
    HYPIC_RETURN_IF_ERROR(r.U32(&e.n_tokens));
    HYPIC_RETURN_IF_ERROR(r.U64(&e.bytes));
    HYPIC_RETURN_IF_ERROR(r.U64(&e.hits));
    HYPIC_RETURN_IF_ERROR(r.U64(&e.last_access_ms));
    HYPIC_RETURN_IF_ERROR(r.U32(&e.pins));
    HYPIC_RETURN_IF_ERROR(r.U32(&e.ttl_s));
  }
  HYPIC_RETURN_IF_ERROR(r.Finish("LIST reply"));
  return m;
}

// ---- VERIFY ----

Bytes Encode(const VerifyReply& m) {
  return EncodeWith(m, [](WireWriter& w, const VerifyReply& x) {
    w.U64(x.checked);
    w.U64(x.bad);
    w.U32(static_cast<uint32_t>(x.bad_keys.size()));
    for (const auto& k : x.bad_keys) w.Key(k);
  });
}

template <>
Result<VerifyReply> Decode<VerifyReply>(ByteSpan bytes) {
  WireReader r(bytes);
  VerifyReply m;
  HYPIC_RETURN_IF_ERROR(r.U64(&m.checked));
  HYPIC_RETURN_IF_ERROR(r.U64(&m.bad));
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxVerifyBadKeys, 16, "VERIFY bad keys"));
  m.bad_keys.resize(n);
  for (auto& k : m.bad_keys) HYPIC_RETURN_IF_ERROR(r.Key(&k));
  HYPIC_RETURN_IF_ERROR(r.Finish("VERIFY reply"));
  return m;
}

// ---- Tensor stream ----

Result<Bytes> EncodeTensorStream(std::span<const StreamTensor> tensors) {
  Bytes out;
  WireWriter w(&out);
  w.U32(static_cast<uint32_t>(tensors.size()));
  for (const auto& t : tensors) {
    int64_t numel = t.shape.NumElements();
    if (numel < 0 || static_cast<uint64_t>(numel) * DTypeSize(t.dtype) != t.data.size()) {
      return BadRequest("tensor stream: layer " + std::to_string(t.layer) + " " +
                        std::string(TensorKindName(t.kind)) + " has " +
                        std::to_string(t.data.size()) + " bytes for shape " + t.shape.ToString());
    }
    w.U32(t.layer);
    WriteEnum(w, t.kind);
    WriteEnum(w, t.dtype);
    w.U8(static_cast<uint8_t>(t.shape.rank()));
    w.U8(0);  // reserved
    for (int i = 0; i < t.shape.rank(); ++i) w.I64(t.shape[i]);
    w.U64(t.data.size());
    w.Raw(t.data.data(), t.data.size());
  }
  return out;
}

namespace {

// A tensor stream at the start of `r`'s bytes; what follows it is left in `r`.
Result<std::vector<StreamTensor>> ReadTensorStream(WireReader& r) {
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(r.Count(&n, kMaxStreamTensors, 16, "stream tensors"));
  std::vector<StreamTensor> out(n);
  for (auto& t : out) {
    HYPIC_RETURN_IF_ERROR(r.U32(&t.layer));
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &t.kind, kMaxTensorKind, "tensor kind"));
    HYPIC_RETURN_IF_ERROR(ReadEnum(r, &t.dtype, kMaxDType, "dtype"));
    uint8_t rank = 0;
    uint8_t reserved = 0;
    HYPIC_RETURN_IF_ERROR(r.U8(&rank));
    HYPIC_RETURN_IF_ERROR(r.U8(&reserved));
    if (rank > kMaxRank || reserved != 0) {
      return BadRequest("tensor stream: rank " + std::to_string(rank) + " or reserved byte " +
                        std::to_string(reserved) + " invalid");
    }
    uint64_t numel = 1;
    std::array<int64_t, kMaxRank> dims{};
    for (uint8_t i = 0; i < rank; ++i) {
      HYPIC_RETURN_IF_ERROR(r.I64(&dims[i]));
      if (dims[i] < 0 || dims[i] > (int64_t{1} << 40)) {
        return BadRequest("tensor stream: dim " + std::to_string(dims[i]) + " out of range");
      }
      if (numel != 0 && static_cast<uint64_t>(dims[i]) > (uint64_t{1} << 48) / numel) {
        return TooLarge("tensor stream: tensor has too many elements");
      }
      numel *= static_cast<uint64_t>(dims[i]);
    }
    t.shape = MakeShape(rank, dims);
    uint64_t nbytes = 0;
    HYPIC_RETURN_IF_ERROR(r.U64(&nbytes));
    if (nbytes != numel * DTypeSize(t.dtype)) {
      return BadRequest("tensor stream: layer " + std::to_string(t.layer) + " declares " +
                        std::to_string(nbytes) + " bytes for shape " + t.shape.ToString());
    }
    HYPIC_RETURN_IF_ERROR(r.View(static_cast<size_t>(nbytes), &t.data, "tensor data"));
  }
  return out;
}

}  // namespace

Result<std::vector<StreamTensor>> DecodeTensorStream(ByteSpan bytes) {
  WireReader r(bytes);
  HYPIC_ASSIGN_OR_RETURN(std::vector<StreamTensor> out, ReadTensorStream(r));
  HYPIC_RETURN_IF_ERROR(r.Finish("tensor stream"));
  return out;
}

Result<ComposeReply> DecodeComposeReply(ByteSpan body, StateLayout layout) {
  if (layout == StateLayout::kHeadFirst) return Decode<ComposeReply>(body);
  WireReader r(body);
  HYPIC_RETURN_IF_ERROR(ReadTensorStream(r).status());
  const ByteSpan stream = body.first(body.size() - r.remaining());
  HYPIC_ASSIGN_OR_RETURN(ComposeReply m, Decode<ComposeReply>(r.Rest()));
  if (!m.has_state || !m.state.empty()) {
    return BadRequest(m.has_state ? "bytes after the head of a state-first COMPOSE reply"
                                  : "a state-first COMPOSE reply whose head says it has no state");
  }
  m.state.assign(stream.begin(), stream.end());
  return m;
}

}  // namespace hypic::protocol
