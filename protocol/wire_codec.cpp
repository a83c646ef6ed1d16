#include "protocol/wire_codec.h"

namespace hypic::protocol {

void WireWriter::Raw(const void* p, size_t n) {
  if (n == 0) return;
  const auto* b = static_cast<const std::byte*>(p);
  out_->insert(out_->end(), b, b + n);
}

void WireWriter::Key(const Hash128& k) {
  std::byte b[16];
  k.ToBytes(b);
  Raw(b, 16);
}

void WireWriter::String(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  Raw(s.data(), s.size());
}

void WireWriter::Blob(ByteSpan b) {
  U32(static_cast<uint32_t>(b.size()));
  Raw(b.data(), b.size());
}

Status WireReader::Fixed(void* v, size_t n, std::string_view what) {
  if (remaining() < n) {
    return BadRequest("truncated body: " + std::string(what) + " at offset " +
                      std::to_string(pos_));
  }
  std::memcpy(v, in_.data() + pos_, n);
  pos_ += n;
  return Status::Ok();
}

Status WireReader::Bool(bool* v) {
  uint8_t b = 0;
  HYPIC_RETURN_IF_ERROR(U8(&b));
  if (b > 1) return BadRequest("boolean byte " + std::to_string(b) + " is not 0 or 1");
  *v = b == 1;
  return Status::Ok();
}

Status WireReader::Key(Hash128* k) {
  if (remaining() < 16) return BadRequest("truncated body: key at offset " + std::to_string(pos_));
  *k = Hash128::FromBytes(in_.data() + pos_);
  pos_ += 16;
  return Status::Ok();
}

Status WireReader::View(size_t n, ByteSpan* out, std::string_view what) {
  if (remaining() < n) {
    return BadRequest("truncated body: " + std::string(what) + " needs " + std::to_string(n) +
                      " bytes, " + std::to_string(remaining()) + " left");
  }
  *out = in_.subspan(pos_, n);
  pos_ += n;
  return Status::Ok();
}

Status WireReader::Sized(ByteSpan* v, uint32_t max_len, std::string_view what) {
  uint32_t n = 0;
  HYPIC_RETURN_IF_ERROR(U32(&n));
  if (n > max_len) {
    return TooLarge(std::string(what) + " of " + std::to_string(n) + " bytes exceeds " +
                    std::to_string(max_len));
  }
  return View(n, v, what);
}

Status WireReader::String(std::string* s, uint32_t max_len, std::string_view what) {
  ByteSpan v;
  HYPIC_RETURN_IF_ERROR(Sized(&v, max_len, what));
  s->assign(reinterpret_cast<const char*>(v.data()), v.size());
  return Status::Ok();
}

Status WireReader::Blob(Bytes* b, uint32_t max_len, std::string_view what) {
  ByteSpan v;
  HYPIC_RETURN_IF_ERROR(Sized(&v, max_len, what));
  b->assign(v.begin(), v.end());
  return Status::Ok();
}

Status WireReader::Count(uint32_t* n, uint32_t max_count, size_t min_elem_size,
                         std::string_view what) {
  HYPIC_RETURN_IF_ERROR(U32(n));
  if (*n > max_count) {
    return TooLarge(std::string(what) + " count " + std::to_string(*n) + " exceeds " +
                    std::to_string(max_count));
  }
  if (static_cast<uint64_t>(*n) * min_elem_size > remaining()) {
    return BadRequest(std::string(what) + " count " + std::to_string(*n) + " does not fit in the " +
                      std::to_string(remaining()) + " bytes left");
  }
  return Status::Ok();
}

Status WireReader::Finish(std::string_view what) const {
  if (remaining() != 0) {
    return BadRequest(std::to_string(remaining()) + " trailing bytes after " + std::string(what));
  }
  return Status::Ok();
}

}  // namespace hypic::protocol
