#include "tools/hypic-stress/ack_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/hash.h"

namespace hypic::stress {
namespace {

constexpr size_t kRecord = 16;

uint64_t SeedCheck(uint64_t seed) { return Xxh3_64(&seed, sizeof(seed)); }

}  // namespace

AckLog::~AckLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status AckLog::Open(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return IoError("open " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

Status AckLog::Append(uint64_t seed) {
  unsigned char rec[kRecord];
  uint64_t check = SeedCheck(seed);
  std::memcpy(rec, &seed, 8);
  std::memcpy(rec + 8, &check, 8);
  if (::write(fd_, rec, kRecord) != static_cast<ssize_t>(kRecord)) {
    return IoError(std::string("ack log write: ") + std::strerror(errno));
  }
  if (::fdatasync(fd_) != 0) return IoError(std::string("ack log sync: ") + std::strerror(errno));
  return Status::Ok();
}

Result<std::vector<uint64_t>> AckLog::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::vector<uint64_t>{};  // nothing was acknowledged
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<uint64_t> seeds;
  for (size_t off = 0; off + kRecord <= bytes.size(); off += kRecord) {
    uint64_t seed, check;
    std::memcpy(&seed, bytes.data() + off, 8);
    std::memcpy(&check, bytes.data() + off + 8, 8);
    if (check != SeedCheck(seed)) break;  // a torn tail: the rest was never acknowledged
    seeds.push_back(seed);
  }
  return seeds;
}

}  // namespace hypic::stress
