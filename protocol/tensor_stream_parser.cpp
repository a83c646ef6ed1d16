#include "protocol/tensor_stream_parser.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "protocol/wire_codec.h"

namespace hypic::protocol {

namespace {

constexpr size_t kFixedSize = 8;  // u32 layer, u8 kind, u8 dtype, u8 rank, u8 reserved

}  // namespace

TensorStreamParser::TensorStreamParser(OnTensor on_tensor, uint64_t max_tensor_bytes)
    : on_tensor_(std::move(on_tensor)), max_tensor_bytes_(max_tensor_bytes) {}

Status TensorStreamParser::Fail(Status s) {
  error_ = s;
  return s;
}

bool TensorStreamParser::Gather(ByteSpan& bytes, size_t want) {
  size_t take = std::min(want - head_.size(), bytes.size());
  head_.insert(head_.end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(take));
  bytes = bytes.subspan(take);
  return head_.size() == want;
}

Status TensorStreamParser::Feed(ByteSpan bytes) {
  size_t consumed = 0;
  HYPIC_RETURN_IF_ERROR(FeedPrefix(bytes, &consumed));
  if (consumed < bytes.size()) {
    return Fail(BadRequest("tensor stream: " + std::to_string(bytes.size() - consumed) +
                           " bytes after the last tensor"));
  }
  return Status::Ok();
}

Status TensorStreamParser::FeedPrefix(ByteSpan bytes, size_t* consumed) {
  ByteSpan left = bytes;
  Status st = Consume(left);
  *consumed = bytes.size() - left.size();
  return st;
}

Status TensorStreamParser::Consume(ByteSpan& bytes) {
  if (!error_.ok()) return error_;
  while (!bytes.empty() && step_ != Step::kEnd) {
    switch (step_) {
      case Step::kCount: {
        if (!Gather(bytes, 4)) return Status::Ok();
        total_ = LoadWire<uint32_t>(head_.data());
        head_.clear();
        if (total_ > kMaxStreamTensors) {
          return Fail(TooLarge("tensor stream: " + std::to_string(total_) + " tensors exceed " +
                               std::to_string(kMaxStreamTensors)));
        }
        step_ = total_ == 0 ? Step::kEnd : Step::kFixed;
        break;
      }
      case Step::kFixed: {
        if (!Gather(bytes, kFixedSize)) return Status::Ok();
        cur_ = OwnedStreamTensor();
        cur_.layer = LoadWire<uint32_t>(head_.data());
        auto kind = static_cast<uint8_t>(head_[4]);
        auto dtype = static_cast<uint8_t>(head_[5]);
        rank_ = static_cast<uint8_t>(head_[6]);
        auto reserved = static_cast<uint8_t>(head_[7]);
        head_.clear();
        if (kind > kMaxTensorKind) {
          return Fail(BadRequest("unknown tensor kind " + std::to_string(kind)));
        }
        if (dtype > kMaxDType) return Fail(BadRequest("unknown dtype " + std::to_string(dtype)));
        if (rank_ > kMaxRank || reserved != 0) {
          return Fail(BadRequest("tensor stream: rank " + std::to_string(rank_) +
                                 " or reserved byte " + std::to_string(reserved) + " invalid"));
        }
        cur_.kind = static_cast<TensorKind>(kind);
        cur_.dtype = static_cast<DType>(dtype);
        numel_ = 1;
        dims_ = {};
        step_ = rank_ == 0 ? Step::kNbytes : Step::kDims;
        break;
      }
      case Step::kDims: {
        if (!Gather(bytes, size_t{rank_} * 8)) return Status::Ok();
        for (uint8_t i = 0; i < rank_; ++i) {
          dims_[i] = LoadWire<int64_t>(head_.data() + size_t{i} * 8);
          if (dims_[i] < 0 || dims_[i] > (int64_t{1} << 40)) {
            return Fail(
                BadRequest("tensor stream: dim " + std::to_string(dims_[i]) + " out of range"));
          }
          if (numel_ != 0 && static_cast<uint64_t>(dims_[i]) > (uint64_t{1} << 48) / numel_) {
            return Fail(TooLarge("tensor stream: tensor has too many elements"));
          }
          numel_ *= static_cast<uint64_t>(dims_[i]);
        }
        head_.clear();
        auto shape = Shape::FromDims(std::span<const int64_t>(dims_.data(), rank_));
        if (!shape.ok()) return Fail(shape.status());
        cur_.shape = *shape;
        step_ = Step::kNbytes;
        break;
      }
      case Step::kNbytes: {
        if (!Gather(bytes, 8)) return Status::Ok();
        uint64_t nbytes = LoadWire<uint64_t>(head_.data());
        head_.clear();
        if (nbytes != numel_ * DTypeSize(cur_.dtype)) {
          return Fail(BadRequest("tensor stream: layer " + std::to_string(cur_.layer) +
                                 " declares " + std::to_string(nbytes) + " bytes for shape " +
                                 cur_.shape.ToString()));
        }
        if (nbytes > max_tensor_bytes_) {
          return Fail(TooLarge("tensor stream: a tensor of " + std::to_string(nbytes) +
                               " bytes exceeds " + std::to_string(max_tensor_bytes_)));
        }
        cur_.data.resize(static_cast<size_t>(nbytes));
        filled_ = 0;
        step_ = Step::kData;
        if (nbytes == 0) HYPIC_RETURN_IF_ERROR(OnHead());
        break;
      }
      case Step::kData: {
        size_t take = std::min(cur_.data.size() - filled_, bytes.size());
        std::memcpy(cur_.data.data() + filled_, bytes.data(), take);
        filled_ += take;
        bytes = bytes.subspan(take);
        if (filled_ == cur_.data.size()) HYPIC_RETURN_IF_ERROR(OnHead());
        break;
      }
      case Step::kEnd: break;  // not reached: the loop stops there
    }
  }
  // A zero-byte tensor whose nbytes field was the last thing fed is complete already.
  return Status::Ok();
}

Status TensorStreamParser::OnHead() {
  ++done_;
  step_ = done_ == total_ ? Step::kEnd : Step::kFixed;
  Status st = on_tensor_(std::move(cur_));
  cur_ = OwnedStreamTensor();
  if (!st.ok()) return Fail(st);
  return Status::Ok();
}

Status TensorStreamParser::Finish() const {
  if (!error_.ok()) return error_;
  if (step_ != Step::kEnd) {
    return BadRequest("tensor stream ended early: " + std::to_string(done_) + " of " +
                      (step_ == Step::kCount ? std::string("?") : std::to_string(total_)) +
                      " tensors");
  }
  return Status::Ok();
}

}  // namespace hypic::protocol
