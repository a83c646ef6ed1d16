// AckLog: the part of hypic-stress's expected-state oracle that must survive kill -9. It is an
// append-only file of acknowledged puts, one 16-byte record per put (u64 seed, u64 xxh3-64 of
// the seed), fdatasync'ed before the next operation, so every record on disk names a put the
// store acknowledged. A torn or garbled tail (the writer was killed mid-append) is ignored on
// read. Everything else the oracle needs (the bytes each key must hold) is derived from the
// seed. Not thread-safe: callers serialize Append.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace hypic::stress {

class AckLog {
 public:
  AckLog() = default;
  ~AckLog();
  AckLog(const AckLog&) = delete;
  AckLog& operator=(const AckLog&) = delete;

  Status Open(const std::string& path);  // creates or appends
  Status Append(uint64_t seed);          // returns once the record is durable

  // The seeds of every intact record, in order.
  static Result<std::vector<uint64_t>> Read(const std::string& path);

 private:
  int fd_ = -1;
};

}  // namespace hypic::stress
