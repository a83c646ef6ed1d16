// WireWriter / WireReader: the little-endian primitives every message body is made of
// (README "Body encoding"): fixed-width integers, f32, 16-byte keys, u32-length-prefixed
// strings and byte strings, and u32-count-prefixed arrays.
//
// The reader never reads past its span and never allocates for a count it has not checked
// against the bytes that remain (ReadCount), so a lying count cannot make it allocate.
// Both are single-threaded value types; a WireReader views memory its caller keeps alive.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/hash.h"
#include "core/status.h"
#include "protocol/frame.h"

namespace hypic::protocol {

// The T stored little-endian at p, unaligned (the hosts are little-endian, as the wire): for
// parsers that read fixed fields out of a buffer without a WireReader.
template <typename T>
T LoadWire(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

class WireWriter {
 public:
  explicit WireWriter(Bytes* out) : out_(out) {}

  void U8(uint8_t v) { Raw(&v, 1); }
  void U16(uint16_t v) { Raw(&v, 2); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void I64(int64_t v) { Raw(&v, 8); }
  void F32(float v) { Raw(&v, 4); }
  void Key(const Hash128& k);
  void String(std::string_view s);  // u32 length + bytes
  void Blob(ByteSpan b);            // u32 length + bytes
  void Raw(const void* p, size_t n);

 private:
  Bytes* out_;
};

class WireReader {
 public:
  explicit WireReader(ByteSpan in) : in_(in) {}

  Status U8(uint8_t* v) { return Fixed(v, 1, "u8"); }
  Status U16(uint16_t* v) { return Fixed(v, 2, "u16"); }
  Status U32(uint32_t* v) { return Fixed(v, 4, "u32"); }
  Status U64(uint64_t* v) { return Fixed(v, 8, "u64"); }
  Status I64(int64_t* v) { return Fixed(v, 8, "i64"); }
  Status F32(float* v) { return Fixed(v, 4, "f32"); }
  Status Bool(bool* v);  // a u8 that must be 0 or 1
  Status Key(Hash128* k);
  // u32 length + bytes; kTooLarge above max_len.
  Status String(std::string* s, uint32_t max_len, std::string_view what);
  Status Blob(Bytes* b, uint32_t max_len, std::string_view what);
  // A u32 element count, checked against `max_count` (kTooLarge) and against the bytes left
  // given that every element takes at least `min_elem_size` bytes (kBadRequest).
  Status Count(uint32_t* n, uint32_t max_count, size_t min_elem_size, std::string_view what);
  // `n` raw bytes as a view into the input.
  Status View(size_t n, ByteSpan* out, std::string_view what);

  size_t remaining() const { return in_.size() - pos_; }
  ByteSpan Rest() const { return in_.subspan(pos_); }
  // kBadRequest unless every byte was consumed (trailing bytes are an error, so one message
  // has exactly one encoding and round trips are byte-identical).
  Status Finish(std::string_view what) const;

 private:
  Status Fixed(void* v, size_t n, std::string_view what);
  // A u32 length (kTooLarge above max_len), then that many bytes as a view.
  Status Sized(ByteSpan* v, uint32_t max_len, std::string_view what);

  ByteSpan in_;
  size_t pos_ = 0;
};

}  // namespace hypic::protocol
