// The serialized form of one SegmentEntry: the unit every tier holds, the server streams as-is
// for GET, and parses and verifies for PUT. The byte layout is specified in
// docs/entry-format.md (field widths, endianness, caps); this file is its only implementation.
//
// Serialize builds a fresh buffer. Parse is zero-copy: the returned entry's tensors view into
// the buffer, which the entry keeps alive. Verify is the cheap re-check used on every copy
// between tiers and every SSD read: header checksum, declared size and the whole-entry
// checksum, without decoding the tensor table.
//
// Failure codes: kCorruption (bad magic or layout), kVersionMismatch (unknown format version),
// kTooLarge (a count or length over its cap), kBadChecksum (a checksum, or the key, does not
// match the bytes), kBadRequest (Serialize: an entry that cannot be stored). Pure functions,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/host_buffer.h"
#include "core/segment_entry.h"
#include "core/status.h"

namespace hypic::storage {

inline constexpr uint32_t kEntryFormatVersion = 1;
inline constexpr size_t kEntryHeaderSize = 128;
inline constexpr size_t kEntryTableRecordSize = 80;
inline constexpr size_t kEntryTrailerSize = 8;
// Tensor data starts on this boundary (from the start of the entry) so that a device copy of
// one tensor is a plain aligned memcpy.
inline constexpr size_t kEntryDataAlignment = 256;

// Caps checked before anything is allocated or indexed (docs/entry-format.md, "Caps").
inline constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 32;  // 4 GiB
inline constexpr uint32_t kMaxEntryTokens = uint32_t{1} << 20;
inline constexpr uint32_t kMaxNamespaceBytes = 256;
inline constexpr uint32_t kMaxEntryLayers = 1024;
inline constexpr uint32_t kMaxEntryTensors = 5 * kMaxEntryLayers;
inline constexpr uint32_t kMaxSeamWindow = 4096;
inline constexpr uint32_t kMaxConvK = 64;

// The parsed header: what the tiers and the index need about an entry without its tensors.
struct EntryInfo {
  SegmentKey key;
  ModelFingerprint model;
  std::string name_space;
  CacheSettings settings;
  uint32_t conv_k = 0;
  uint32_t num_layers = 0;
  uint32_t n_tokens = 0;
  uint32_t tensor_count = 0;
  uint64_t bytes = 0;  // the whole serialized entry

  // Recompute cost in token-layers: the numerator of the cost-aware eviction score.
  uint64_t Cost() const { return uint64_t{n_tokens} * num_layers; }
};

// Serializes `entry` into a new buffer (4 KiB-aligned). Checks the entry first: caps, host
// contiguous tensors, layer < num_layers, and key == SegmentKey::Compute(meta). Tensors are
// written in (layer, kind) order, so equal entries serialize to equal bytes.
Result<std::shared_ptr<const HostBuffer>> Serialize(const SegmentEntry& entry);

// Parses and fully validates `bytes`: header and table against the caps, every offset and
// length, zero padding, the header, whole-entry and per-tensor checksums, and the key against
// the namespace, model, settings and tokens. The entry views into `bytes` and owns a reference.
Result<std::shared_ptr<const SegmentEntry>> Parse(std::shared_ptr<const HostBuffer> bytes);

// The same over memory owned by `owner` (pinned or otherwise). REQUIRES: `owner` keeps `bytes`
// alive and unchanged; `bytes.data()` is 8-byte aligned (kCorruption otherwise).
Result<std::shared_ptr<const SegmentEntry>> ParseView(std::span<const std::byte> bytes,
                                                      std::shared_ptr<const void> owner);

// The offset where an entry's tensor data start: the length of the prefix (header, namespace,
// tokens, tensor table) that ParseDeviceView reads. Needs at least the header and namespace.
Result<uint64_t> EntryDataOffset(std::span<const std::byte> prefix);

// Parses an entry whose bytes were copied to a device (the HBM tier): `prefix` is a host copy
// of its first EntryDataOffset bytes, and `data` is where the entry's first byte is in the
// device's memory, so tensor i is at data + its offset, a view of kind `memory` on `device`.
// Everything the prefix holds is validated as Parse does (caps, header checksum, layout, the
// table's offsets and lengths within the declared size, zero padding, the key); the tensor
// data are not read: the caller verified the whole entry before copying it (Verify or Parse).
// REQUIRES: `owner` keeps the prefix and the device copy alive; the prefix is 8-byte aligned.
Result<std::shared_ptr<const SegmentEntry>> ParseDeviceView(std::span<const std::byte> prefix,
                                                            const std::byte* data,
                                                            MemoryKind memory, int device,
                                                            std::shared_ptr<const void> owner);

// Checksum-only re-verification: magic, version, header checksum, declared size, whole-entry
// checksum. One pass over the bytes.
Status Verify(std::span<const std::byte> bytes);

// Decodes the header and namespace from a prefix of an entry (at least
// EntryPrefixSize(prefix) bytes) and checks the header checksum. Used to rebuild an index
// from stored headers without reading tensor data.
Result<EntryInfo> ReadEntryInfo(std::span<const std::byte> prefix);

// The length of the prefix that ReadEntryInfo needs: the header plus the namespace. Returns
// kCorruption when `prefix` is shorter than the header.
Result<size_t> EntryPrefixSize(std::span<const std::byte> prefix);

// The EntryInfo of an in-memory entry, as Serialize would record it (bytes included).
Result<EntryInfo> InfoOf(const SegmentEntry& entry);

}  // namespace hypic::storage
