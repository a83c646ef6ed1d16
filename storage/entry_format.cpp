#include "storage/entry_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/hash.h"

namespace hypic::storage {
namespace {

static_assert(std::endian::native == std::endian::little, "the entry format is little-endian");

constexpr std::array<char, 8> kMagic = {'H', 'Y', 'P', 'I', 'C', 'E', 'N', 'T'};

// Header field offsets (docs/entry-format.md, "Header").
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffHeaderSize = 12;
constexpr size_t kOffKey = 16;
constexpr size_t kOffModel = 32;
constexpr size_t kOffSeamW = 48;
constexpr size_t kOffConvK = 52;
constexpr size_t kOffNumLayers = 56;
constexpr size_t kOffNumTokens = 60;
constexpr size_t kOffNamespaceLen = 64;
constexpr size_t kOffTensorCount = 68;
constexpr size_t kOffTotalSize = 72;
constexpr size_t kOffTableOffset = 80;
constexpr size_t kOffDataOffset = 88;
constexpr size_t kOffAlignment = 96;
constexpr size_t kOffFlags = 100;
constexpr size_t kOffEntryDTypes = 104;  // u8 each: T, S, conv tail, K/V (0 = f32)
constexpr size_t kOffReserved = 108;
constexpr size_t kReservedBytes = 12;
constexpr size_t kOffHeaderChecksum = 120;

// Table record field offsets.
constexpr size_t kRecLayer = 0;
constexpr size_t kRecKind = 4;
constexpr size_t kRecDType = 5;
constexpr size_t kRecRank = 6;
constexpr size_t kRecReserved = 7;
constexpr size_t kRecDims = 8;
constexpr size_t kRecOffset = 56;
constexpr size_t kRecLength = 64;
constexpr size_t kRecChecksum = 72;

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void Store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

bool AllZero(const std::byte* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != std::byte{0}) return false;
  }
  return true;
}

// Section offsets that follow from the header counts. The format is canonical: the stored
// offsets must equal these, so no two layouts describe the same entry.
struct Layout {
  uint64_t tokens_offset = 0;
  uint64_t table_offset = 0;
  uint64_t data_offset = 0;
};

Layout ComputeLayout(uint32_t ns_len, uint32_t n_tokens, uint32_t tensor_count) {
  Layout l;
  l.tokens_offset = AlignUp(kEntryHeaderSize + ns_len, 4);
  l.table_offset = AlignUp(l.tokens_offset + uint64_t{n_tokens} * 4, 8);
  l.data_offset =
      AlignUp(l.table_offset + uint64_t{tensor_count} * kEntryTableRecordSize, kEntryDataAlignment);
  return l;
}

uint64_t HeaderChecksum(const std::byte* bytes, uint32_t ns_len) {
  // The checksum field itself reads as zero. The prefix is at most 128 + 256 bytes.
  std::array<std::byte, kEntryHeaderSize + kMaxNamespaceBytes> copy;
  size_t n = kEntryHeaderSize + ns_len;
  std::memcpy(copy.data(), bytes, n);
  std::memset(copy.data() + kOffHeaderChecksum, 0, 8);
  return Xxh3_64(copy.data(), n);
}

Status CheckCaps(uint32_t ns_len, uint32_t n_tokens, uint32_t num_layers, uint32_t tensor_count,
                 uint32_t seam_w, uint32_t conv_k) {
  if (ns_len > kMaxNamespaceBytes) {
    return TooLarge(
        fmt::format("namespace of {} bytes exceeds the cap of {}", ns_len, kMaxNamespaceBytes));
  }
  if (n_tokens > kMaxEntryTokens) {
    return TooLarge(fmt::format("{} tokens exceed the cap of {}", n_tokens, kMaxEntryTokens));
  }
  if (num_layers > kMaxEntryLayers) {
    return TooLarge(fmt::format("{} layers exceed the cap of {}", num_layers, kMaxEntryLayers));
  }
  if (tensor_count > kMaxEntryTensors) {
    return TooLarge(fmt::format("{} tensors exceed the cap of {}", tensor_count, kMaxEntryTensors));
  }
  if (seam_w > kMaxSeamWindow) {
    return TooLarge(fmt::format("seam window {} exceeds the cap of {}", seam_w, kMaxSeamWindow));
  }
  if (conv_k > kMaxConvK) {
    return TooLarge(fmt::format("conv kernel {} exceeds the cap of {}", conv_k, kMaxConvK));
  }
  return Status::Ok();
}

// Decoded header fields, before the table is looked at.
struct Header {
  EntryInfo info;
  uint64_t table_offset = 0;
  uint64_t data_offset = 0;
};

Result<Header> DecodeHeader(std::span<const std::byte> bytes, bool need_whole_entry) {
  if (bytes.size() < kEntryHeaderSize) {
    return Corruption(fmt::format("entry of {} bytes is shorter than its {}-byte header",
                                  bytes.size(), kEntryHeaderSize));
  }
  const std::byte* p = bytes.data();
  if (std::memcmp(p + kOffMagic, kMagic.data(), kMagic.size()) != 0) {
    return Corruption("entry has a bad magic");
  }
  uint32_t version = Load<uint32_t>(p + kOffVersion);
  if (version != kEntryFormatVersion) {
    return VersionMismatch(fmt::format("entry format version {} is not supported (this build: {})",
                                       version, kEntryFormatVersion));
  }
  if (Load<uint32_t>(p + kOffHeaderSize) != kEntryHeaderSize ||
      Load<uint32_t>(p + kOffAlignment) != kEntryDataAlignment ||
      Load<uint32_t>(p + kOffFlags) != 0 || !AllZero(p + kOffReserved, kReservedBytes)) {
    return Corruption("entry header has a bad size, alignment, flags or reserved field");
  }
  EntryDTypes dtypes;
  DType* fields[] = {&dtypes.transition, &dtypes.state, &dtypes.conv, &dtypes.kv};
  for (size_t i = 0; i < 4; ++i) {
    const auto t = static_cast<uint8_t>(p[kOffEntryDTypes + i]);
    if (t > kMaxDType || !IsEntryDType(static_cast<DType>(t))) {
      return Corruption(fmt::format("entry header names dtype {} for a tensor kind", t));
    }
    *fields[i] = static_cast<DType>(t);
  }
  Header h;
  EntryInfo& info = h.info;
  info.key = SegmentKey(Hash128::FromBytes(p + kOffKey));
  info.model = Hash128::FromBytes(p + kOffModel);
  info.settings.format_version = version;
  info.settings.seam_w = Load<uint32_t>(p + kOffSeamW);
  info.settings.entry_dtypes = dtypes;
  info.conv_k = Load<uint32_t>(p + kOffConvK);
  info.num_layers = Load<uint32_t>(p + kOffNumLayers);
  info.n_tokens = Load<uint32_t>(p + kOffNumTokens);
  uint32_t ns_len = Load<uint32_t>(p + kOffNamespaceLen);
  info.tensor_count = Load<uint32_t>(p + kOffTensorCount);
  info.bytes = Load<uint64_t>(p + kOffTotalSize);
  h.table_offset = Load<uint64_t>(p + kOffTableOffset);
  h.data_offset = Load<uint64_t>(p + kOffDataOffset);
  HYPIC_RETURN_IF_ERROR(CheckCaps(ns_len, info.n_tokens, info.num_layers, info.tensor_count,
                                  info.settings.seam_w, info.conv_k));
  if (bytes.size() < kEntryHeaderSize + ns_len) {
    return Corruption("entry prefix is shorter than its header and namespace");
  }
  if (Load<uint64_t>(p + kOffHeaderChecksum) != HeaderChecksum(p, ns_len)) {
    return BadChecksum("entry header checksum mismatch");
  }
  if (info.bytes > kMaxEntryBytes) {
    return TooLarge(
        fmt::format("entry of {} bytes exceeds the cap of {}", info.bytes, kMaxEntryBytes));
  }
  Layout l = ComputeLayout(ns_len, info.n_tokens, info.tensor_count);
  if (h.table_offset != l.table_offset || h.data_offset != l.data_offset ||
      info.bytes < l.data_offset + kEntryTrailerSize) {
    return Corruption("entry header offsets do not match its counts");
  }
  if (need_whole_entry && bytes.size() != info.bytes) {
    return Corruption(
        fmt::format("entry declares {} bytes but {} are present", info.bytes, bytes.size()));
  }
  info.name_space.assign(reinterpret_cast<const char*>(p + kEntryHeaderSize), ns_len);
  return h;
}

Status CheckTrailer(std::span<const std::byte> bytes) {
  size_t body = bytes.size() - kEntryTrailerSize;
  if (Load<uint64_t>(bytes.data() + body) != Xxh3_64(bytes.data(), body)) {
    return BadChecksum("entry checksum mismatch");
  }
  return Status::Ok();
}

// REQUIRES: rank <= kMaxRank.
Shape ShapeOf(const std::array<int64_t, kMaxRank>& d, uint8_t rank) {
  switch (rank) {
    case 0: return Shape{};
    case 1: return Shape{d[0]};
    case 2: return Shape{d[0], d[1]};
    case 3: return Shape{d[0], d[1], d[2]};
    case 4: return Shape{d[0], d[1], d[2], d[3]};
    case 5: return Shape{d[0], d[1], d[2], d[3], d[4]};
    default: return Shape{d[0], d[1], d[2], d[3], d[4], d[5]};
  }
}

bool KindOrderLess(uint32_t la, uint8_t ka, uint32_t lb, uint8_t kb) {
  return la != lb ? la < lb : ka < kb;
}

}  // namespace

Result<size_t> EntryPrefixSize(std::span<const std::byte> prefix) {
  if (prefix.size() < kEntryHeaderSize) {
    return Corruption("entry prefix is shorter than its header");
  }
  uint32_t ns_len = Load<uint32_t>(prefix.data() + kOffNamespaceLen);
  if (ns_len > kMaxNamespaceBytes) return TooLarge("entry namespace length over its cap");
  return kEntryHeaderSize + ns_len;
}

Result<EntryInfo> ReadEntryInfo(std::span<const std::byte> prefix) {
  HYPIC_ASSIGN_OR_RETURN(Header h, DecodeHeader(prefix, /*need_whole_entry=*/false));
  return std::move(h.info);
}

Status Verify(std::span<const std::byte> bytes) {
  HYPIC_ASSIGN_OR_RETURN(Header h, DecodeHeader(bytes, /*need_whole_entry=*/true));
  (void)h;
  return CheckTrailer(bytes);
}

Result<EntryInfo> InfoOf(const SegmentEntry& entry) {
  const EntryMeta& m = entry.meta();
  if (m.name_space.size() > kMaxNamespaceBytes || m.tokens.size() > kMaxEntryTokens ||
      entry.tensors().size() > kMaxEntryTensors) {
    return TooLarge("entry namespace, tokens or tensor count over its cap");
  }
  EntryInfo info;
  info.key = m.key;
  info.model = m.model;
  info.name_space = m.name_space;
  info.settings = m.settings;
  info.conv_k = m.conv_k;
  info.num_layers = m.num_layers;
  info.n_tokens = static_cast<uint32_t>(m.tokens.size());
  info.tensor_count = static_cast<uint32_t>(entry.tensors().size());
  HYPIC_RETURN_IF_ERROR(CheckCaps(static_cast<uint32_t>(m.name_space.size()), info.n_tokens,
                                  info.num_layers, info.tensor_count, m.settings.seam_w, m.conv_k));
  Layout l =
      ComputeLayout(static_cast<uint32_t>(m.name_space.size()), info.n_tokens, info.tensor_count);
  uint64_t end = l.data_offset;
  for (const auto& t : entry.tensors()) {
    end = AlignUp(end, kEntryDataAlignment) + t.view.NumBytes();
    if (end > kMaxEntryBytes) {
      return TooLarge(fmt::format("entry exceeds the cap of {} bytes", kMaxEntryBytes));
    }
  }
  info.bytes = AlignUp(end, 8) + kEntryTrailerSize;
  if (info.bytes > kMaxEntryBytes) {
    return TooLarge(fmt::format("entry exceeds the cap of {} bytes", kMaxEntryBytes));
  }
  return info;
}

Result<std::shared_ptr<const HostBuffer>> Serialize(const SegmentEntry& entry) {
  const EntryMeta& m = entry.meta();
  if (m.settings.format_version != kEntryFormatVersion) {
    return VersionMismatch(
        fmt::format("entry settings name format version {}; this build writes {}",
                    m.settings.format_version, kEntryFormatVersion));
  }
  HYPIC_ASSIGN_OR_RETURN(EntryInfo info, InfoOf(entry));
  const EntryDTypes& dtypes = m.settings.entry_dtypes;
  for (DType t : {dtypes.transition, dtypes.state, dtypes.conv, dtypes.kv}) {
    if (!IsEntryDType(t)) {
      return BadRequest(
          fmt::format("entry settings name dtype {} for a tensor kind (want F32, "
                      "BF16 or F16)",
                      static_cast<int>(t)));
    }
  }
  if (SegmentKey::Compute(m.name_space, m.model, m.settings, m.tokens) != m.key) {
    return BadRequest("entry key does not match its namespace, model, settings and tokens");
  }
  const auto& tensors = entry.tensors();
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return KindOrderLess(tensors[a].layer, static_cast<uint8_t>(tensors[a].kind), tensors[b].layer,
                         static_cast<uint8_t>(tensors[b].kind));
  });
  for (const auto& t : tensors) {
    const TensorView& v = t.view;
    if (t.layer >= m.num_layers) {
      return BadRequest(fmt::format("entry tensor layer {} is not below the layer count {}",
                                    t.layer, m.num_layers));
    }
    if (static_cast<uint8_t>(t.kind) > kMaxTensorKind ||
        static_cast<uint8_t>(v.dtype()) > kMaxDType) {
      return BadRequest(fmt::format("entry tensor layer {} has a bad kind or dtype", t.layer));
    }
    if (v.memory() == MemoryKind::kDevice || !v.IsContiguous() ||
        (v.data() == nullptr && v.NumBytes() != 0) || v.NumElements() < 0) {
      return BadRequest(fmt::format("entry tensor layer {} {} is not contiguous host memory",
                                    t.layer, TensorKindName(t.kind)));
    }
  }

  Layout l =
      ComputeLayout(static_cast<uint32_t>(m.name_space.size()), info.n_tokens, info.tensor_count);
  HYPIC_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(info.bytes));
  std::byte* p = buf.data();  // zero-filled: padding and reserved fields need no writes
  std::memcpy(p + kOffMagic, kMagic.data(), kMagic.size());
  Store<uint32_t>(p + kOffVersion, kEntryFormatVersion);
  Store<uint32_t>(p + kOffHeaderSize, kEntryHeaderSize);
  m.key.hash().ToBytes(p + kOffKey);
  m.model.ToBytes(p + kOffModel);
  Store<uint32_t>(p + kOffSeamW, m.settings.seam_w);
  p[kOffEntryDTypes + 0] = static_cast<std::byte>(dtypes.transition);
  p[kOffEntryDTypes + 1] = static_cast<std::byte>(dtypes.state);
  p[kOffEntryDTypes + 2] = static_cast<std::byte>(dtypes.conv);
  p[kOffEntryDTypes + 3] = static_cast<std::byte>(dtypes.kv);
  Store<uint32_t>(p + kOffConvK, m.conv_k);
  Store<uint32_t>(p + kOffNumLayers, m.num_layers);
  Store<uint32_t>(p + kOffNumTokens, info.n_tokens);
  Store<uint32_t>(p + kOffNamespaceLen, static_cast<uint32_t>(m.name_space.size()));
  Store<uint32_t>(p + kOffTensorCount, info.tensor_count);
  Store<uint64_t>(p + kOffTotalSize, info.bytes);
  Store<uint64_t>(p + kOffTableOffset, l.table_offset);
  Store<uint64_t>(p + kOffDataOffset, l.data_offset);
  Store<uint32_t>(p + kOffAlignment, kEntryDataAlignment);
  if (!m.name_space.empty())
    std::memcpy(p + kEntryHeaderSize, m.name_space.data(), m.name_space.size());
  if (!m.tokens.empty()) std::memcpy(p + l.tokens_offset, m.tokens.data(), m.tokens.size() * 4);

  uint64_t cursor = l.data_offset;
  for (size_t i = 0; i < order.size(); ++i) {
    const EntryTensor& t = tensors[order[i]];
    std::byte* rec = p + l.table_offset + i * kEntryTableRecordSize;
    uint64_t length = t.view.NumBytes();
    cursor = AlignUp(cursor, kEntryDataAlignment);
    Store<uint32_t>(rec + kRecLayer, t.layer);
    rec[kRecKind] = static_cast<std::byte>(t.kind);
    rec[kRecDType] = static_cast<std::byte>(t.view.dtype());
    rec[kRecRank] = static_cast<std::byte>(t.view.rank());
    for (int d = 0; d < t.view.rank(); ++d) {
      Store<uint64_t>(rec + kRecDims + 8 * static_cast<size_t>(d),
                      static_cast<uint64_t>(t.view.dim(d)));
    }
    Store<uint64_t>(rec + kRecOffset, cursor);
    Store<uint64_t>(rec + kRecLength, length);
    if (length != 0) std::memcpy(p + cursor, t.view.data(), length);
    Store<uint64_t>(rec + kRecChecksum, Xxh3_64(p + cursor, length));
    cursor += length;
  }
  Store<uint64_t>(p + kOffHeaderChecksum,
                  HeaderChecksum(p, static_cast<uint32_t>(m.name_space.size())));
  size_t body = info.bytes - kEntryTrailerSize;
  Store<uint64_t>(p + body, Xxh3_64(p, body));
  return std::shared_ptr<const HostBuffer>(std::make_shared<HostBuffer>(std::move(buf)));
}

Result<std::shared_ptr<const SegmentEntry>> Parse(std::shared_ptr<const HostBuffer> bytes) {
  if (bytes == nullptr) return BadRequest("Parse of a null buffer");
  std::span<const std::byte> span = bytes->span();
  return ParseView(span, std::move(bytes));
}

namespace {

// Where the tensor data of an entry being parsed is. For host bytes, `bytes` is the whole entry
// and every data check runs (per-tensor checksums, the padding between tensors, the trailer's
// place). For a device copy, `bytes` is the host copy of the prefix through the tensor table
// (header, namespace, tokens, table), the data are at `device_data` in `memory` of `device`,
// and only what the prefix holds is checked: the data were verified before they were copied.
struct TensorData {
  const std::byte* device_data = nullptr;  // null: the data are in `bytes`
  MemoryKind memory = MemoryKind::kHost;
  int device = 0;
};

Result<std::shared_ptr<const SegmentEntry>> ParseEntry(std::span<const std::byte> bytes,
                                                       const TensorData& where,
                                                       std::shared_ptr<const void> owner) {
  const bool host_data = where.device_data == nullptr;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) {
    return Corruption("entry bytes are not 8-byte aligned in memory");
  }
  HYPIC_ASSIGN_OR_RETURN(Header h, DecodeHeader(bytes, /*need_whole_entry=*/host_data));
  if (host_data) {
    HYPIC_RETURN_IF_ERROR(CheckTrailer(bytes));
  } else if (bytes.size() != h.data_offset) {
    return Corruption(fmt::format("entry prefix of {} bytes does not end where its data start ({})",
                                  bytes.size(), h.data_offset));
  }
  const EntryInfo& info = h.info;
  const std::byte* p = bytes.data();
  const std::byte* data = host_data ? p : where.device_data;
  const uint32_t ns_len = static_cast<uint32_t>(info.name_space.size());
  Layout l = ComputeLayout(ns_len, info.n_tokens, info.tensor_count);
  const uint64_t trailer = info.bytes - kEntryTrailerSize;
  uint64_t table_end = l.table_offset + uint64_t{info.tensor_count} * kEntryTableRecordSize;
  if (table_end > trailer) return Corruption("entry tensor table runs past the entry");
  if (!AllZero(p + kEntryHeaderSize + ns_len, l.tokens_offset - kEntryHeaderSize - ns_len) ||
      !AllZero(p + l.tokens_offset + uint64_t{info.n_tokens} * 4,
               l.table_offset - l.tokens_offset - uint64_t{info.n_tokens} * 4) ||
      !AllZero(p + table_end, l.data_offset - table_end)) {
    return Corruption("entry padding is not zero");
  }

  EntryMeta meta;
  meta.key = info.key;
  meta.model = info.model;
  meta.name_space = info.name_space;
  meta.settings = info.settings;
  meta.conv_k = info.conv_k;
  meta.num_layers = info.num_layers;
  meta.tokens.resize(info.n_tokens);
  if (info.n_tokens != 0) {
    std::memcpy(meta.tokens.data(), p + l.tokens_offset, uint64_t{info.n_tokens} * 4);
  }
  if (SegmentKey::Compute(meta.name_space, meta.model, meta.settings, meta.tokens) != meta.key) {
    return BadChecksum("entry key does not match its namespace, model, settings and tokens");
  }

  auto entry = std::make_shared<SegmentEntry>(std::move(meta));
  uint64_t cursor = l.data_offset;
  uint32_t prev_layer = 0;
  uint8_t prev_kind = 0;
  for (uint32_t i = 0; i < info.tensor_count; ++i) {
    const std::byte* rec = p + l.table_offset + uint64_t{i} * kEntryTableRecordSize;
    uint32_t layer = Load<uint32_t>(rec + kRecLayer);
    uint8_t kind = static_cast<uint8_t>(rec[kRecKind]);
    uint8_t dtype = static_cast<uint8_t>(rec[kRecDType]);
    uint8_t rank = static_cast<uint8_t>(rec[kRecRank]);
    if (layer >= info.num_layers || kind > kMaxTensorKind || dtype > kMaxDType || rank > kMaxRank ||
        rec[kRecReserved] != std::byte{0}) {
      return Corruption(fmt::format("entry tensor {}: bad layer, kind, dtype or rank", i));
    }
    if (i > 0 && !KindOrderLess(prev_layer, prev_kind, layer, kind)) {
      return Corruption(fmt::format("entry tensor {}: out of (layer, kind) order", i));
    }
    prev_layer = layer;
    prev_kind = kind;
    std::array<int64_t, kMaxRank> dims{};
    for (size_t d = 0; d < kMaxRank; ++d) {
      uint64_t dim = Load<uint64_t>(rec + kRecDims + 8 * d);
      if (d >= rank && dim != 0) return Corruption(fmt::format("entry tensor {}: stray dim", i));
      if (dim > kMaxEntryBytes) return Corruption(fmt::format("entry tensor {}: huge dim", i));
      dims[d] = static_cast<int64_t>(dim);
    }
    Shape shape = ShapeOf(dims, rank);
    int64_t numel = shape.NumElements();
    uint64_t length = Load<uint64_t>(rec + kRecLength);
    uint64_t offset = Load<uint64_t>(rec + kRecOffset);
    uint64_t expected_offset = AlignUp(cursor, kEntryDataAlignment);
    if (numel < 0 || static_cast<uint64_t>(numel) > kMaxEntryBytes ||
        length != static_cast<uint64_t>(numel) * DTypeSize(static_cast<DType>(dtype))) {
      return Corruption(fmt::format("entry tensor {}: length does not match its shape", i));
    }
    if (offset != expected_offset || offset > trailer || length > trailer - offset) {
      return Corruption(fmt::format("entry tensor {}: offset or length out of place", i));
    }
    if (host_data) {
      if (!AllZero(p + cursor, offset - cursor)) return Corruption("entry padding is not zero");
      if (Load<uint64_t>(rec + kRecChecksum) != Xxh3_64(p + offset, length)) {
        return BadChecksum(fmt::format("entry tensor {} (layer {} {}) checksum mismatch", i, layer,
                                       TensorKindName(static_cast<TensorKind>(kind))));
      }
    }
    TensorView view(const_cast<std::byte*>(data + offset), static_cast<DType>(dtype), shape,
                    where.memory, where.device);
    HYPIC_RETURN_IF_ERROR(entry->AddView(layer, static_cast<TensorKind>(kind), view, owner));
    cursor = offset + length;
  }
  if (AlignUp(cursor, 8) != trailer || (host_data && !AllZero(p + cursor, trailer - cursor))) {
    return Corruption("entry data does not end at its trailer");
  }
  return std::shared_ptr<const SegmentEntry>(std::move(entry));
}

}  // namespace

Result<std::shared_ptr<const SegmentEntry>> ParseView(std::span<const std::byte> bytes,
                                                      std::shared_ptr<const void> owner) {
  return ParseEntry(bytes, TensorData{}, std::move(owner));
}

Result<uint64_t> EntryDataOffset(std::span<const std::byte> prefix) {
  HYPIC_ASSIGN_OR_RETURN(Header h, DecodeHeader(prefix, /*need_whole_entry=*/false));
  return h.data_offset;
}

Result<std::shared_ptr<const SegmentEntry>> ParseDeviceView(std::span<const std::byte> prefix,
                                                            const std::byte* data,
                                                            MemoryKind memory, int device,
                                                            std::shared_ptr<const void> owner) {
  if (data == nullptr) return BadRequest("ParseDeviceView without the entry's data");
  return ParseEntry(prefix, TensorData{data, memory, device}, std::move(owner));
}

}  // namespace hypic::storage
