#include "core/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace hypic {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Thrown from the JSON parser callback to abort a parse early; caught in this file only.
struct JsonRejected {
  std::string reason;
};

// A safetensors header (and an index file) nests containers at most this deep: root object,
// tensor object, shape array. Deeper input is rejected while parsing, which also bounds the
// parser's work on hostile input.
constexpr int kMaxJsonContainerDepth = 3;

// Parses `text` as JSON, rejecting duplicate keys (nlohmann would silently keep the last one,
// which makes the meaning of a file depend on the parser) and nesting deeper than
// kMaxJsonContainerDepth. Never throws.
Result<Json> ParseStrictJson(std::string_view text, std::string_view origin,
                             std::string_view what) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto callback = [&keys](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        // `depth` is the depth of the container that holds the new one.
        if (depth >= kMaxJsonContainerDepth) {
          throw JsonRejected{fmt::format("nested deeper than {} levels", kMaxJsonContainerDepth)};
        }
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end: keys.pop_back(); break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          throw JsonRejected{fmt::format("duplicate key \"{}\"", parsed.get<std::string>())};
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const JsonRejected& e) {
    return Corruption(fmt::format("{}: {} is not valid: {}", origin, what, e.reason));
  } catch (const std::exception& e) {
    return Corruption(fmt::format("{}: {} is not valid JSON: {}", origin, what, e.what()));
  }
}

uint64_t LoadU64Le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

// Reads a JSON array of non-negative integers. Returns false when `j` is not one.
bool ReadUnsignedArray(const Json& j, std::vector<uint64_t>* out) {
  if (!j.is_array()) return false;
  out->clear();
  for (const Json& v : j) {
    if (!v.is_number_unsigned()) return false;
    out->push_back(v.get<uint64_t>());
  }
  return true;
}

Result<SafetensorsTensorInfo> ParseTensorEntry(const std::string& name, const Json& entry,
                                               uint64_t data_bytes, std::string_view origin) {
  auto bad = [&](std::string_view why) {
    return Corruption(fmt::format("{}: tensor \"{}\": {}", origin, name, why));
  };
  // Legal JSON, but no checkpoint has one, and our writer refuses it: keep read and write
  // symmetric.
  if (name.empty()) return bad("empty tensor name");
  if (!entry.is_object()) return bad("entry is not a JSON object");

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return bad("missing \"dtype\"");
  if (!dtype_it->is_string()) return bad("\"dtype\" is not a string");
  const auto& dtype_name = dtype_it->get_ref<const std::string&>();
  std::optional<DType> dtype = DTypeFromName(dtype_name);
  if (!dtype) {
    return Unsupported(fmt::format(
        "{}: tensor \"{}\": unsupported dtype \"{}\" (supported: F32, F16, BF16, I32, I64, U8)",
        origin, name, dtype_name));
  }

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return bad("missing \"shape\"");
  std::vector<uint64_t> dims;
  if (!ReadUnsignedArray(*shape_it, &dims)) {
    return bad(fmt::format("\"shape\" must be an array of non-negative integers, got {}",
                           shape_it->dump()));
  }
  std::vector<int64_t> signed_dims;
  for (uint64_t d : dims) {
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad(fmt::format("dimension {} is too large", d));
    }
    signed_dims.push_back(static_cast<int64_t>(d));
  }
  Result<Shape> shape = Shape::FromDims(signed_dims);
  if (!shape.ok()) {
    return Unsupported(
        fmt::format("{}: tensor \"{}\": {}", origin, name, shape.status().message()));
  }
  // Checked product of dims and the item size. A zero dim makes it 0 whatever the others are.
  uint64_t bytes = 0;
  if (std::find(dims.begin(), dims.end(), 0) == dims.end()) {
    bytes = DTypeSize(*dtype);
    for (uint64_t d : dims) {
      if (bytes > std::numeric_limits<uint64_t>::max() / d) {
        return bad(fmt::format("shape {} overflows 64 bits of bytes", shape_it->dump()));
      }
      bytes *= d;
    }
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) return bad("missing \"data_offsets\"");
  std::vector<uint64_t> offsets;
  if (!ReadUnsignedArray(*offsets_it, &offsets) || offsets.size() != 2) {
    return bad(fmt::format("\"data_offsets\" must be [begin, end] of non-negative integers, got {}",
                           offsets_it->dump()));
  }
  SafetensorsTensorInfo info{*dtype, *shape, offsets[0], offsets[1]};
  if (info.begin > info.end) {
    return bad(fmt::format("data_offsets [{}, {}] are reversed", info.begin, info.end));
  }
  if (info.end > data_bytes) {
    return bad(fmt::format("data_offsets [{}, {}] run past the data section of {} bytes",
                           info.begin, info.end, data_bytes));
  }
  if (info.size() != bytes) {
    return bad(fmt::format("shape {} x {} bytes = {} bytes, but data_offsets [{}, {}] span {}",
                           info.shape.ToString(), DTypeSize(info.dtype), bytes, info.begin,
                           info.end, info.size()));
  }
  return info;
}

Status CheckNoOverlap(const std::map<std::string, SafetensorsTensorInfo>& tensors,
                      std::string_view origin) {
  std::vector<std::pair<const std::string*, const SafetensorsTensorInfo*>> spans;
  for (const auto& [name, info] : tensors) {
    if (info.size() > 0) spans.emplace_back(&name, &info);
  }
  std::sort(spans.begin(), spans.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    const auto& prev = spans[i - 1];
    const auto& cur = spans[i];
    if (cur.second->begin < prev.second->end) {
      return Corruption(fmt::format("{}: tensor \"{}\" [{}, {}) overlaps tensor \"{}\" [{}, {})",
                                    origin, *cur.first, cur.second->begin, cur.second->end,
                                    *prev.first, prev.second->begin, prev.second->end));
    }
  }
  return Status::Ok();
}

Status CheckShardName(const std::string& shard, const std::string& tensor,
                      std::string_view origin) {
  bool bad = shard.empty() || shard.find('/') != std::string::npos ||
             shard.find('\\') != std::string::npos || shard.find('\0') != std::string::npos ||
             shard.find("..") != std::string::npos;
  if (bad) {
    return Corruption(fmt::format(
        "{}: tensor \"{}\": shard name \"{}\" is not a plain file name in the checkpoint directory",
        origin, tensor, shard));
  }
  return Status::Ok();
}

Status ErrnoStatus(int err, std::string_view what, const fs::path& path) {
  std::string m = fmt::format("{}: {}: {}", path.string(), what, std::strerror(err));
  if (err == ENOENT) return NotFound(std::move(m));
  if (err == ENOSPC || err == EDQUOT) return NoSpace(std::move(m));
  return IoError(std::move(m));
}

// Reads a whole small file (an index); kTooLarge above `cap` bytes.
Result<std::string> ReadSmallFile(const fs::path& path, uint64_t cap) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  std::string out;
  struct stat st {};
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = ErrnoStatus(errno, "cannot stat", path);
  } else if (static_cast<uint64_t>(st.st_size) > cap) {
    status =
        TooLarge(fmt::format("{}: {} bytes exceeds the cap of {}", path.string(), st.st_size, cap));
  } else {
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = ErrnoStatus(errno, "read failed", path);
        break;
      }
      if (n == 0) {
        status = IoError(fmt::format("{}: file shrank while reading", path.string()));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parsing

Result<ParsedSafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file_bytes,
                                                       std::string_view origin) {
  const uint64_t size = file_bytes.size();
  if (size < 8) {
    return Corruption(
        fmt::format("{}: file is {} bytes, shorter than the 8-byte header length", origin, size));
  }
  ParsedSafetensorsHeader h;
  h.header_bytes = LoadU64Le(file_bytes.data());
  if (h.header_bytes > size - 8) {
    return Corruption(fmt::format("{}: header length {} runs past the end of the {}-byte file",
                                  origin, h.header_bytes, size));
  }
  if (h.header_bytes > kMaxSafetensorsHeaderBytes) {
    return TooLarge(fmt::format("{}: header length {} exceeds the cap of {} bytes", origin,
                                h.header_bytes, kMaxSafetensorsHeaderBytes));
  }
  h.data_offset = 8 + h.header_bytes;
  h.data_bytes = size - h.data_offset;

  std::string_view text(reinterpret_cast<const char*>(file_bytes.data()) + 8,
                        static_cast<size_t>(h.header_bytes));
  HYPIC_ASSIGN_OR_RETURN(Json root, ParseStrictJson(text, origin, "header"));
  if (!root.is_object()) {
    return Corruption(
        fmt::format("{}: header is not a JSON object (it is {})", origin, root.type_name()));
  }
  for (const auto& [name, value] : root.items()) {
    if (name == kSafetensorsMetadataKey) {
      if (!value.is_object()) {
        return Corruption(fmt::format("{}: {} is not a JSON object", origin, name));
      }
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) {
          return Corruption(fmt::format("{}: {} entry \"{}\" is not a string (it is {})", origin,
                                        name, key, v.type_name()));
        }
        h.metadata.emplace(key, v.get<std::string>());
      }
      continue;
    }
    HYPIC_ASSIGN_OR_RETURN(SafetensorsTensorInfo info,
                           ParseTensorEntry(name, value, h.data_bytes, origin));
    h.tensors.emplace(name, info);
  }
  HYPIC_RETURN_IF_ERROR(CheckNoOverlap(h.tensors, origin));
  return h;
}

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json,
                                                                 std::string_view origin) {
  HYPIC_ASSIGN_OR_RETURN(Json root, ParseStrictJson(json, origin, "index"));
  if (!root.is_object()) {
    return Corruption(fmt::format("{}: index is not a JSON object", origin));
  }
  auto meta = root.find("metadata");
  if (meta != root.end() && !meta->is_object()) {
    return Corruption(fmt::format("{}: \"metadata\" is not a JSON object", origin));
  }
  auto map_it = root.find("weight_map");
  if (map_it == root.end() || !map_it->is_object()) {
    return Corruption(fmt::format("{}: missing \"weight_map\" object", origin));
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) {
      return Corruption(fmt::format("{}: tensor \"{}\": shard is not a string (it is {})", origin,
                                    tensor, shard.type_name()));
    }
    const auto& shard_name = shard.get_ref<const std::string&>();
    HYPIC_RETURN_IF_ERROR(CheckShardName(shard_name, tensor, origin));
    weight_map.emplace(tensor, shard_name);
  }
  return weight_map;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::SafetensorsFile(fs::path path, const std::byte* map, size_t map_bytes,
                                 ParsedSafetensorsHeader header)
    : path_(std::move(path)), map_(map), map_bytes_(map_bytes), header_(std::move(header)) {}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), map_bytes_);
}

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open safetensors file", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = ErrnoStatus(errno, "cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError(fmt::format("{}: not a regular file", path.string()));
  }
  const auto size = static_cast<size_t>(st.st_size);
  const std::byte* map = nullptr;
  if (size > 0) {  // mmap rejects length 0; the parser reports the empty file
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = ErrnoStatus(errno, "mmap failed", path);
      ::close(fd);
      return s;
    }
    map = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  // Own the mapping before parsing so every error path unmaps it.
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile(path, map, size, {}));
  HYPIC_ASSIGN_OR_RETURN(file->header_, ParseSafetensorsHeader({map, size}, path.string()));
  return std::shared_ptr<const SafetensorsFile>(std::move(file));
}

Result<const SafetensorsTensorInfo*> SafetensorsFile::Info(std::string_view name) const {
  auto it = header_.tensors.find(std::string(name));
  if (it == header_.tensors.end()) {
    return NotFound(fmt::format("{}: no tensor \"{}\"", path_.string(), name));
  }
  return &it->second;
}

Result<std::span<const std::byte>> SafetensorsFile::Bytes(std::string_view name) const {
  HYPIC_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  if (info->size() == 0) return std::span<const std::byte>();
  return std::span<const std::byte>(map_ + header_.data_offset + info->begin, info->size());
}

Result<TensorView> SafetensorsFile::Get(std::string_view name) const {
  HYPIC_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  HYPIC_ASSIGN_OR_RETURN(std::span<const std::byte> bytes, Bytes(name));
  // The mapping is page-aligned, so the file offset decides the alignment. An empty tensor
  // has no data to misalign.
  if (info->size() > 0 && (header_.data_offset + info->begin) % DTypeSize(info->dtype) != 0) {
    return Unsupported(fmt::format(
        "{}: tensor \"{}\" starts at file offset {}, not aligned to its {}-byte elements; "
        "use ReadCopy",
        path_.string(), name, header_.data_offset + info->begin, DTypeSize(info->dtype)));
  }
  // The view type has no const flavour; the memory is read-only (see the file comment).
  return TensorView(const_cast<std::byte*>(bytes.data()), info->dtype, info->shape);
}

Result<HostBuffer> SafetensorsFile::ReadCopy(std::string_view name) const {
  HYPIC_ASSIGN_OR_RETURN(std::span<const std::byte> bytes, Bytes(name));
  return HostBuffer::CopyOf(bytes);
}

// ---------------------------------------------------------------------------------------------
// SafetensorsCheckpoint

Result<std::shared_ptr<const SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const fs::path& path) {
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / kSafetensorsIndexFileName, ec)) {
      file = path / kSafetensorsIndexFileName;
    } else if (fs::exists(path / kSafetensorsFileName, ec)) {
      file = path / kSafetensorsFileName;
    } else {
      return NotFound(fmt::format("{}: holds neither {} nor {}", path.string(),
                                  kSafetensorsIndexFileName, kSafetensorsFileName));
    }
  }
  std::shared_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
  ckpt->path_ = path;

  if (!EndsWith(file.filename().string(), ".index.json")) {
    HYPIC_ASSIGN_OR_RETURN(auto shard, SafetensorsFile::Open(file));
    for (const auto& [name, info] : shard->tensors()) ckpt->owner_.emplace(name, 0);
    ckpt->shards_.push_back(std::move(shard));
    return std::shared_ptr<const SafetensorsCheckpoint>(std::move(ckpt));
  }

  const std::string origin = file.string();
  HYPIC_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(file, kMaxSafetensorsHeaderBytes));
  HYPIC_ASSIGN_OR_RETURN(auto weight_map, ParseSafetensorsIndex(text, origin));
  std::map<std::string, size_t> shard_index;  // shard file name -> index into shards_
  for (const auto& [tensor, shard_name] : weight_map) {
    if (shard_index.count(shard_name) != 0) continue;
    Result<std::shared_ptr<const SafetensorsFile>> shard =
        SafetensorsFile::Open(file.parent_path() / shard_name);
    if (!shard.ok()) {
      return shard.status().WithContext(
          fmt::format("{}: shard \"{}\" (holding tensor \"{}\")", origin, shard_name, tensor));
    }
    shard_index.emplace(shard_name, ckpt->shards_.size());
    ckpt->shards_.push_back(std::move(shard).value());
  }
  for (const auto& [tensor, shard_name] : weight_map) {
    const size_t i = shard_index.at(shard_name);
    if (ckpt->shards_[i]->tensors().count(tensor) == 0) {
      return Corruption(fmt::format("{}: tensor \"{}\" is mapped to shard \"{}\", which lacks it",
                                    origin, tensor, shard_name));
    }
    ckpt->owner_.emplace(tensor, i);
  }
  for (const auto& [shard_name, i] : shard_index) {
    for (const auto& [tensor, info] : ckpt->shards_[i]->tensors()) {
      auto mapped = weight_map.find(tensor);
      if (mapped == weight_map.end()) {
        return Corruption(fmt::format("{}: tensor \"{}\" of shard \"{}\" is not in the weight_map",
                                      origin, tensor, shard_name));
      }
      if (mapped->second != shard_name) {
        return Corruption(fmt::format("{}: tensor \"{}\" appears in shards \"{}\" and \"{}\"",
                                      origin, tensor, mapped->second, shard_name));
      }
    }
  }
  return std::shared_ptr<const SafetensorsCheckpoint>(std::move(ckpt));
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(owner_.size());
  for (const auto& [name, shard] : owner_) names.push_back(name);
  return names;
}

Result<const SafetensorsFile*> SafetensorsCheckpoint::ShardOf(std::string_view name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) {
    return NotFound(fmt::format("{}: no tensor \"{}\"", path_.string(), name));
  }
  return shards_[it->second].get();
}

Result<const SafetensorsTensorInfo*> SafetensorsCheckpoint::Info(std::string_view name) const {
  HYPIC_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return shard->Info(name);
}

Result<TensorView> SafetensorsCheckpoint::Get(std::string_view name) const {
  HYPIC_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return shard->Get(name);
}

Result<HostBuffer> SafetensorsCheckpoint::ReadCopy(std::string_view name) const {
  HYPIC_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return shard->ReadCopy(name);
}

// ---------------------------------------------------------------------------------------------
// Writing

Status WriteFileAtomically(const fs::path& path,
                           std::span<const std::span<const std::byte>> pieces) {
  static std::atomic<uint64_t> counter{0};
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const fs::path tmp = dir / fmt::format(".{}.tmp.{}.{}", path.filename().string(), ::getpid(),
                                         counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create temporary file", tmp);
  Status status;
  for (std::span<const std::byte> piece : pieces) {
    size_t done = 0;
    while (status.ok() && done < piece.size()) {
      ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = ErrnoStatus(errno, "write failed", tmp);
      } else {
        done += static_cast<size_t>(n);
      }
    }
  }
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus(errno, "fsync failed", tmp);
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "close failed", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, "rename failed", path);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (::fsync(dfd) != 0) status = ErrnoStatus(errno, "fsync of directory failed", dir);
    ::close(dfd);
  }
  return status;
}

Status WriteSafetensorsIndex(const fs::path& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size) {
  const std::string origin = path.string();
  Json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", Json::object()}};
  for (const auto& [tensor, shard] : weight_map) {
    Status name_ok = CheckShardName(shard, tensor, origin);
    if (!name_ok.ok()) return BadRequest("cannot write " + name_ok.message());
    index["weight_map"][tensor] = shard;
  }
  std::string text;
  try {
    text = index.dump(2);
  } catch (const std::exception& e) {
    return BadRequest(fmt::format("{}: cannot serialize the index: {}", origin, e.what()));
  }
  text += '\n';
  const std::span<const std::byte> piece = std::as_bytes(std::span<const char>(text));
  return WriteFileAtomically(path, {&piece, 1});
}

Status SafetensorsWriter::Add(std::string name, DType dtype, const Shape& shape,
                              std::span<const std::byte> bytes) {
  HYPIC_ASSIGN_OR_RETURN(HostBuffer copy, HostBuffer::CopyOf(bytes));
  return Add(std::move(name), dtype, shape, std::move(copy));
}

Status SafetensorsWriter::Add(std::string name, DType dtype, const Shape& shape, HostBuffer bytes) {
  if (name.empty() || name == kSafetensorsMetadataKey) {
    return BadRequest(fmt::format("safetensors writer: invalid tensor name \"{}\"", name));
  }
  if (tensors_.count(name) != 0) {
    return BadRequest(fmt::format("safetensors writer: tensor \"{}\" added twice", name));
  }
  const int64_t n = shape.NumElements();
  if (n < 0) {
    return BadRequest(
        fmt::format("safetensors writer: tensor \"{}\": bad shape {}", name, shape.ToString()));
  }
  const size_t item = DTypeSize(dtype);
  if (static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / item ||
      static_cast<uint64_t>(n) * item != bytes.size()) {
    return BadRequest(
        fmt::format("safetensors writer: tensor \"{}\": shape {} of {} needs {} x {} bytes, got {}",
                    name, shape.ToString(), DTypeName(dtype), n, item, bytes.size()));
  }
  tensors_.emplace(std::move(name), Pending{dtype, shape, std::move(bytes)});
  return Status::Ok();
}

Status SafetensorsWriter::Add(std::string name, const TensorView& view) {
  if (view.memory() == MemoryKind::kDevice) {
    return BadRequest(
        fmt::format("safetensors writer: tensor \"{}\" is in device memory; copy it first", name));
  }
  if (!view.IsContiguous() || view.NumElements() < 0) {
    return BadRequest(
        fmt::format("safetensors writer: tensor \"{}\" is not a contiguous view", name));
  }
  const auto* data = static_cast<const std::byte*>(view.data());
  return Add(std::move(name), view.dtype(), view.shape(),
             std::span<const std::byte>(data, view.NumBytes()));
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

uint64_t SafetensorsWriter::DataBytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.bytes.size();
  return n;
}

std::vector<std::string> SafetensorsWriter::LayoutOrder() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);  // sorted by name
  std::stable_sort(names.begin(), names.end(), [this](const auto& a, const auto& b) {
    return DTypeSize(tensors_.at(a).dtype) > DTypeSize(tensors_.at(b).dtype);
  });
  return names;
}

Result<std::string> SafetensorsWriter::HeaderFor(const std::vector<std::string>& names) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header[std::string(kSafetensorsMetadataKey)] = metadata_;
  uint64_t offset = 0;
  for (const std::string& name : names) {
    const Pending& t = tensors_.at(name);
    std::vector<int64_t> dims;
    for (int i = 0; i < t.shape.rank(); ++i) dims.push_back(t.shape[i]);
    header[name] = {{"dtype", DTypeName(t.dtype)},
                    {"shape", dims},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const std::exception& e) {
    return BadRequest(fmt::format("safetensors writer: cannot serialize the header: {}", e.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json;
}

Status SafetensorsWriter::WriteSubset(const fs::path& path,
                                      const std::vector<std::string>& names) const {
  HYPIC_ASSIGN_OR_RETURN(std::string header, HeaderFor(names));
  std::vector<std::span<const std::byte>> pieces{std::as_bytes(std::span<const char>(header))};
  for (const std::string& name : names) pieces.push_back(tensors_.at(name).bytes.span());
  return WriteFileAtomically(path, pieces);
}

Result<std::vector<std::byte>> SafetensorsWriter::Serialize() const {
  const std::vector<std::string> names = LayoutOrder();
  HYPIC_ASSIGN_OR_RETURN(std::string header, HeaderFor(names));
  std::vector<std::byte> out(header.size() + DataBytes());
  std::memcpy(out.data(), header.data(), header.size());
  std::byte* p = out.data() + header.size();
  for (const std::string& name : names) {
    const HostBuffer& b = tensors_.at(name).bytes;
    if (!b.empty()) std::memcpy(p, b.data(), b.size());
    p += b.size();
  }
  return out;
}

Status SafetensorsWriter::WriteFile(const fs::path& path) const {
  return WriteSubset(path, LayoutOrder());
}

Result<std::vector<std::string>> SafetensorsWriter::WriteSharded(const fs::path& dir,
                                                                 uint64_t max_shard_bytes) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return IoError(fmt::format("{}: cannot create directory: {}", dir.string(), ec.message()));
  std::vector<std::vector<std::string>> groups;
  uint64_t group_bytes = 0;
  for (const std::string& name : LayoutOrder()) {
    const uint64_t b = tensors_.at(name).bytes.size();
    if (groups.empty() || (!groups.back().empty() && group_bytes + b > max_shard_bytes)) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(name);
    group_bytes += b;
  }
  if (groups.empty()) groups.emplace_back();  // an empty checkpoint is still one shard
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;
  for (size_t i = 0; i < groups.size(); ++i) {
    files.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, groups.size()));
    HYPIC_RETURN_IF_ERROR(WriteSubset(dir / files.back(), groups[i]));
    for (const std::string& name : groups[i]) weight_map.emplace(name, files.back());
  }
  HYPIC_RETURN_IF_ERROR(
      WriteSafetensorsIndex(dir / kSafetensorsIndexFileName, weight_map, DataBytes()));
  return files;
}

}  // namespace hypic
