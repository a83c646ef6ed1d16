// safetensors: reading, validating and writing the checkpoint format of MATH.md §7.
//
// Layout: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// (padded with trailing spaces), then the data section: row-major, little-endian, offsets
// relative to its start. Sharded checkpoints add model.safetensors.index.json with a weight_map
// {tensor name: shard file name}.
//
// Reading: ParseSafetensorsHeader validates a whole file image held in memory (the fuzzer and
// SafetensorsFile::Open share it). SafetensorsFile maps the file read-only with mmap; the views
// it hands out point into that mapping, so the SafetensorsFile must outlive every view (hold
// the shared_ptr). The mapping is PROT_READ: writing through a view crashes. If another process
// truncates the file while it is mapped, reads past the new end raise SIGBUS; checkpoints are
// expected to be immutable. SafetensorsFile and SafetensorsCheckpoint are immutable after Open
// and safe for concurrent readers.
//
// Validation (every error names the file, and the tensor where one is involved):
//   kCorruption   truncated file, header length past the end, bad JSON, JSON not an object,
//                 duplicate keys, an empty tensor name, missing/ill-typed fields, negative or
//                 non-integer dims, shape x itemsize != end - begin, offsets reversed or past
//                 the data section, overlapping tensors, __metadata__ not an object of
//                 strings, a bad index.json
//   kTooLarge     header longer than kMaxSafetensorsHeaderBytes
//   kUnsupported  a dtype other than F32, F16, BF16, I32, I64, U8; rank above kMaxRank
//   kNotFound     a missing file or tensor
//   kIoError      open/stat/mmap/write failures (kNoSpace when the disk is full)
// Gaps between tensors are accepted (they are harmless); overlaps are not.
//
// Writing: SafetensorsWriter collects tensors and writes a file through a temporary file in
// the same directory, fsync and rename, so a crash never leaves a half-written file under the
// final name. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/host_buffer.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hypic {

// Caps the JSON header so a hostile length cannot make us parse gigabytes of JSON.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;
inline constexpr std::string_view kSafetensorsMetadataKey = "__metadata__";
inline constexpr std::string_view kSafetensorsFileName = "model.safetensors";
inline constexpr std::string_view kSafetensorsIndexFileName = "model.safetensors.index.json";

struct SafetensorsTensorInfo {
  DType dtype = DType::kF32;
  Shape shape;
  // Byte range [begin, end) relative to the start of the data section.
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t size() const { return end - begin; }
};

struct ParsedSafetensorsHeader {
  uint64_t header_bytes = 0;  // N, including the padding
  uint64_t data_offset = 0;   // 8 + N: where the data section starts in the file
  uint64_t data_bytes = 0;    // file size - data_offset
  std::map<std::string, SafetensorsTensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

// Validates the header of a complete file image. `origin` names the file in error messages.
// Never reads outside `file_bytes`; never throws.
Result<ParsedSafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file_bytes,
                                                       std::string_view origin);

// Validates the text of a model.safetensors.index.json and returns its weight_map (tensor name
// -> shard file name). Shard names must be plain file names: non-empty, no '/', '\\', NUL, and
// no "..". The optional "metadata" member must be an object (HF puts total_size there).
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json,
                                                                 std::string_view origin);

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors as listed at the top of this file.
  static Result<std::shared_ptr<const SafetensorsFile>> Open(const std::filesystem::path& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, SafetensorsTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // kNotFound naming the tensor and the file when absent.
  Result<const SafetensorsTensorInfo*> Info(std::string_view name) const;

  // The raw little-endian bytes of a tensor, inside the mapping.
  Result<std::span<const std::byte>> Bytes(std::string_view name) const;

  // A contiguous host view into the mapping (read-only memory, see above). Returns
  // kUnsupported when the tensor's data is not aligned to its element size in the file (legal
  // in the format, rare in practice: every writer we know aligns); ReadCopy works for those.
  Result<TensorView> Get(std::string_view name) const;

  // An owning, aligned copy of the tensor's bytes.
  Result<HostBuffer> ReadCopy(std::string_view name) const;

 private:
  SafetensorsFile(std::filesystem::path path, const std::byte* map, size_t map_bytes,
                  ParsedSafetensorsHeader header);

  std::filesystem::path path_;
  const std::byte* map_ = nullptr;  // owned: munmap'ed by the destructor
  size_t map_bytes_ = 0;
  ParsedSafetensorsHeader header_;
};

// A checkpoint that is either one file or a set of shards under an index.
class SafetensorsCheckpoint {
 public:
  // `path` is a directory (holding model.safetensors.index.json, else model.safetensors), an
  // index file (name ending in ".index.json"), or a single .safetensors file. For an index,
  // every shard is opened and checked: each weight_map tensor exists in its shard, and every
  // tensor of every shard is mapped to exactly that shard (so no tensor lives in two shards).
  static Result<std::shared_ptr<const SafetensorsCheckpoint>> Open(
      const std::filesystem::path& path);

  // The path Open was given.
  const std::filesystem::path& path() const { return path_; }
  const std::vector<std::shared_ptr<const SafetensorsFile>>& shards() const { return shards_; }
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;
  size_t size() const { return owner_.size(); }

  // The shard that holds `name`, or kNotFound naming the tensor and the checkpoint.
  Result<const SafetensorsFile*> ShardOf(std::string_view name) const;
  Result<const SafetensorsTensorInfo*> Info(std::string_view name) const;
  Result<TensorView> Get(std::string_view name) const;
  Result<HostBuffer> ReadCopy(std::string_view name) const;

 private:
  SafetensorsCheckpoint() = default;

  std::filesystem::path path_;
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::map<std::string, size_t, std::less<>> owner_;  // tensor name -> index into shards_
};

class SafetensorsWriter {
 public:
  // Adds a tensor, copying `bytes`. Returns kBadRequest for an empty, reserved
  // ("__metadata__") or duplicate name, a negative dim, or bytes.size() != elements x itemsize.
  Status Add(std::string name, DType dtype, const Shape& shape, std::span<const std::byte> bytes);
  // As above, taking ownership of `bytes` without copying.
  Status Add(std::string name, DType dtype, const Shape& shape, HostBuffer bytes);
  // Adds a contiguous host view (copied).
  Status Add(std::string name, const TensorView& view);

  // Sets (or replaces) one __metadata__ entry.
  void SetMetadata(std::string key, std::string value);

  size_t size() const { return tensors_.size(); }
  uint64_t DataBytes() const;

  // The whole file image. The data section is laid out by element size (largest first), then
  // by name, without gaps, so every tensor is aligned to its element size and the output does
  // not depend on the order of Add calls. The header is padded with spaces to make the data
  // section start at a multiple of 8. kBadRequest when a name or metadata string is not UTF-8.
  Result<std::vector<std::byte>> Serialize() const;

  // Writes the image to `path` atomically (temp file, fsync, rename, fsync of the directory).
  Status WriteFile(const std::filesystem::path& path) const;

  // Writes the tensors as shards "model-00001-of-0000K.safetensors" of at most
  // `max_shard_bytes` of data each (a larger tensor gets a shard of its own), plus
  // model.safetensors.index.json, into directory `dir` (created if missing). Every shard gets
  // the metadata. Returns the shard file names.
  Result<std::vector<std::string>> WriteSharded(const std::filesystem::path& dir,
                                                uint64_t max_shard_bytes) const;

 private:
  struct Pending {
    DType dtype;
    Shape shape;
    HostBuffer bytes;
  };
  // Names in the layout order described at Serialize.
  std::vector<std::string> LayoutOrder() const;
  // The 8-byte length and the padded JSON header for `names`, laid out in that order.
  Result<std::string> HeaderFor(const std::vector<std::string>& names) const;
  // Streams the header and the tensor bytes of `names` to `path` atomically.
  Status WriteSubset(const std::filesystem::path& path,
                     const std::vector<std::string>& names) const;

  std::map<std::string, Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes model.safetensors.index.json text ({"metadata": {"total_size": N}, "weight_map":
// {...}}) atomically to `path`. Shard names are validated as ParseSafetensorsIndex does.
Status WriteSafetensorsIndex(const std::filesystem::path& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size);

// Writes the concatenation of `pieces` to `path` atomically: a temporary file in the same
// directory, fsync, rename, then fsync of the directory. kIoError (kNoSpace on ENOSPC) naming
// the path on failure; the temporary file is removed.
Status WriteFileAtomically(const std::filesystem::path& path,
                           std::span<const std::span<const std::byte>> pieces);

}  // namespace hypic
