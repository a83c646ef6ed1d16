#include "server/body_buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace hypic::server {

BodyBuffer::BodyBuffer(ByteBudget& budget, uint64_t length) : budget_(&budget), length_(length) {}

BodyBuffer::~BodyBuffer() { ReleaseAll(); }

BodyBuffer::BodyBuffer(BodyBuffer&& other) noexcept
    : budget_(other.budget_),
      length_(std::exchange(other.length_, 0)),
      received_(std::exchange(other.received_, 0)),
      buffer_(std::move(other.buffer_)) {}

BodyBuffer& BodyBuffer::operator=(BodyBuffer&& other) noexcept {
  if (this != &other) {
    ReleaseAll();
    budget_ = other.budget_;
    length_ = std::exchange(other.length_, 0);
    received_ = std::exchange(other.received_, 0);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

void BodyBuffer::ReleaseAll() {
  budget_->Release(buffer_.size());
  buffer_ = HostBuffer();
}

Result<std::span<std::byte>> BodyBuffer::Room(size_t max_bytes) {
  const uint64_t capacity = buffer_.size();
  if (received_ == capacity) {
    const uint64_t step =
        capacity == 0 ? kInitialCapacity : std::min<uint64_t>(capacity, kMaxGrowStep);
    const uint64_t grown = std::min(length_, capacity + step);
    if (!budget_->TryReserve(grown - capacity)) {
      return Busy(
          "the daemon holds max_pending_request_bytes of partially received requests; "
          "retry later");
    }
    Status st = buffer_.Resize(grown);
    if (!st.ok()) {
      budget_->Release(grown - capacity);
      return st;
    }
  }
  const size_t room = std::min<uint64_t>(buffer_.size() - received_, max_bytes);
  return std::span<std::byte>(buffer_.data() + received_, room);
}

Status BodyBuffer::Append(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    HYPIC_ASSIGN_OR_RETURN(std::span<std::byte> room, Room(bytes.size()));
    std::memcpy(room.data(), bytes.data(), room.size());
    Commit(room.size());
    bytes = bytes.subspan(room.size());
  }
  return Status::Ok();
}

std::shared_ptr<HostBuffer> BodyBuffer::Take() {
  budget_->Release(buffer_.size());
  return std::make_shared<HostBuffer>(std::move(buffer_));
}

}  // namespace hypic::server
