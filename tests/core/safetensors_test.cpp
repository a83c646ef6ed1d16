#include "core/safetensors.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "hypic-safetensors-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(std::string_view name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::vector<std::byte> RandomBytes(testing::SeededRng& rng, size_t n) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng.UniformInt(0, 255));
  return out;
}

// A raw file image: the 8-byte little-endian length (of `json`, unless overridden), the JSON,
// then `data_bytes` bytes of data.
std::vector<std::byte> Image(std::string_view json, size_t data_bytes,
                             std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(json.size());
  std::vector<std::byte> out(8 + json.size() + data_bytes, std::byte{0x5a});
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, json.data(), json.size());
  return out;
}

void WriteRaw(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void WriteText(const fs::path& path, std::string_view text) {
  WriteRaw(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::vector<std::byte> ReadRaw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

// Checks the code, and that the message contains every fragment (the file, the tensor...).
void CheckError(const Status& s, StatusCode code, std::initializer_list<std::string> fragments) {
  CAPTURE(s.ToString());
  CHECK(s.code() == code);
  for (const std::string& f : fragments) {
    CAPTURE(f);
    CHECK(s.message().find(f) != std::string::npos);
  }
}

// Writes `bytes` as a file and opens it.
Status OpenImage(const TempDir& dir, std::span<const std::byte> bytes,
                 const std::string& name = "bad.safetensors") {
  WriteRaw(dir / name, bytes);
  return SafetensorsFile::Open(dir / name).status();
}

Status OpenJson(const TempDir& dir, std::string_view json, size_t data_bytes) {
  return OpenImage(dir, Image(json, data_bytes));
}

bool SameBytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

struct Expected {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<std::byte> bytes;
};

std::vector<Expected> SampleTensors(testing::SeededRng& rng) {
  std::vector<Expected> out;
  auto add = [&](std::string name, DType dtype, Shape shape) {
    size_t n = static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype);
    out.push_back({std::move(name), dtype, shape, RandomBytes(rng, n)});
  };
  add("model.embed.weight", DType::kBF16, Shape{17, 8});
  add("layers.0.A_log", DType::kF32, Shape{5});
  add("layers.0.conv.weight", DType::kF16, Shape{3, 1, 4});
  add("layers.0.norm", DType::kF32, Shape{2, 3, 4, 5});
  add("positions", DType::kI32, Shape{11});
  add("token_ids", DType::kI64, Shape{3, 3});
  add("mask", DType::kU8, Shape{13});
  add("scalar", DType::kF32, Shape{});
  add("empty", DType::kF16, Shape{0});
  add("empty2d", DType::kI64, Shape{3, 0});
  add("odd_u8", DType::kU8, Shape{1});
  add("rank6", DType::kBF16, Shape{1, 2, 1, 2, 1, 3});
  return out;
}

void CheckMatches(const SafetensorsFile& file, const std::vector<Expected>& expected) {
  CHECK(file.tensors().size() == expected.size());
  for (const Expected& e : expected) {
    CAPTURE(e.name);
    Result<const SafetensorsTensorInfo*> info = file.Info(e.name);
    REQUIRE_OK(info);
    CHECK((*info)->dtype == e.dtype);
    CHECK((*info)->shape == e.shape);
    Result<std::span<const std::byte>> bytes = file.Bytes(e.name);
    REQUIRE_OK(bytes);
    CHECK(SameBytes(*bytes, e.bytes));
    Result<TensorView> view = file.Get(e.name);
    REQUIRE_OK(view);
    CHECK(view->dtype() == e.dtype);
    CHECK(view->shape() == e.shape);
    CHECK(view->NumBytes() == e.bytes.size());
    CHECK(reinterpret_cast<uintptr_t>(view->data()) % DTypeSize(e.dtype) == 0);
    if (!e.bytes.empty()) {
      CHECK(std::memcmp(view->data(), e.bytes.data(), e.bytes.size()) == 0);
    }
    Result<HostBuffer> copy = file.ReadCopy(e.name);
    REQUIRE_OK(copy);
    CHECK(SameBytes(copy->span(), e.bytes));
  }
}

TEST_CASE("round trip: every dtype, scalars, empty tensors and metadata") {
  TempDir dir;
  testing::SeededRng rng(1);
  const std::vector<Expected> expected = SampleTensors(rng);
  SafetensorsWriter w;
  for (const Expected& e : expected) REQUIRE_OK(w.Add(e.name, e.dtype, e.shape, e.bytes));
  w.SetMetadata("format", "pt");
  w.SetMetadata("hypic", "replaced");
  w.SetMetadata("hypic", "1");
  CHECK(w.size() == expected.size());

  const fs::path path = dir / "model.safetensors";
  REQUIRE_OK(w.WriteFile(path));
  Result<std::shared_ptr<const SafetensorsFile>> file = SafetensorsFile::Open(path);
  REQUIRE_OK(file);
  CHECK((*file)->path() == path);
  CheckMatches(**file, expected);
  CHECK((*file)->metadata() ==
        std::map<std::string, std::string>{{"format", "pt"}, {"hypic", "1"}});
  CHECK((*file)->Get("absent").status().code() == StatusCode::kNotFound);
  CheckError((*file)->Info("absent").status(), StatusCode::kNotFound, {path.string(), "absent"});

  // The in-memory image is the file, and the span parser agrees with Open.
  Result<std::vector<std::byte>> image = w.Serialize();
  REQUIRE_OK(image);
  CHECK(*image == ReadRaw(path));
  Result<ParsedSafetensorsHeader> parsed = ParseSafetensorsHeader(*image, "memory");
  REQUIRE_OK(parsed);
  CHECK(parsed->data_offset % 8 == 0);
  CHECK(parsed->data_bytes == w.DataBytes());
  CHECK(parsed->tensors.size() == expected.size());

  // The layout does not depend on the order of Add calls.
  SafetensorsWriter reversed;
  for (auto it = expected.rbegin(); it != expected.rend(); ++it) {
    REQUIRE_OK(reversed.Add(it->name, it->dtype, it->shape, it->bytes));
  }
  reversed.SetMetadata("hypic", "1");
  reversed.SetMetadata("format", "pt");
  Result<std::vector<std::byte>> image2 = reversed.Serialize();
  REQUIRE_OK(image2);
  CHECK(*image2 == *image);
}

TEST_CASE("writer output is the documented layout, byte for byte") {
  SafetensorsWriter w;
  const std::vector<std::byte> f32(8, std::byte{1}), u8(3, std::byte{2}), i64(8, std::byte{3});
  REQUIRE_OK(w.Add("b", DType::kF32, Shape{2}, f32));
  REQUIRE_OK(w.Add("a", DType::kU8, Shape{3}, u8));
  REQUIRE_OK(w.Add("c", DType::kI64, Shape{}, i64));
  w.SetMetadata("k", "v");
  Result<std::vector<std::byte>> image = w.Serialize();
  REQUIRE_OK(image);
  // Metadata first; data ordered by element size (largest first), then name; no gaps.
  const std::string json =
      R"({"__metadata__":{"k":"v"},"c":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}})";
  const size_t padded = (json.size() + 7) / 8 * 8;
  REQUIRE(image->size() == 8 + padded + 19);
  uint64_t n = 0;
  std::memcpy(&n, image->data(), 8);  // x86-64 is little-endian, as the format
  CHECK(n == padded);
  std::string header(reinterpret_cast<const char*>(image->data()) + 8, padded);
  CHECK(header == json + std::string(padded - json.size(), ' '));
  CHECK((*image)[8 + padded] == std::byte{3});
  CHECK((*image)[8 + padded + 8] == std::byte{1});
  CHECK((*image)[8 + padded + 16] == std::byte{2});
}

TEST_CASE("writer rejects bad tensors") {
  SafetensorsWriter w;
  const std::vector<std::byte> four(4);
  CHECK_OK(w.Add("x", DType::kF32, Shape{1}, four));
  CheckError(w.Add("x", DType::kF32, Shape{1}, four), StatusCode::kBadRequest, {"\"x\"", "twice"});
  CheckError(w.Add("", DType::kF32, Shape{1}, four), StatusCode::kBadRequest, {"name"});
  CheckError(w.Add("__metadata__", DType::kF32, Shape{1}, four), StatusCode::kBadRequest,
             {"__metadata__"});
  CheckError(w.Add("y", DType::kF32, Shape{2}, four), StatusCode::kBadRequest,
             {"\"y\"", "[2]", "got 4"});
  CheckError(w.Add("z", DType::kF32, Shape{-1}, four), StatusCode::kBadRequest, {"\"z\"", "[-1]"});
  float on_device = 0.0f;
  CheckError(w.Add("d", TensorView(&on_device, DType::kF32, Shape{1}, MemoryKind::kDevice)),
             StatusCode::kBadRequest, {"\"d\"", "device"});
  CHECK(w.size() == 1);

  SafetensorsWriter bad_utf8;
  REQUIRE_OK(
      bad_utf8.Add(std::string("bad\xff", 4), DType::kU8, Shape{1}, std::vector<std::byte>(1)));
  CHECK(bad_utf8.Serialize().status().code() == StatusCode::kBadRequest);
}

TEST_CASE("writer takes host views and owned buffers") {
  TempDir dir;
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 8.0f, 1e-3f};
  SafetensorsWriter w;
  REQUIRE_OK(w.Add("view", TensorView(values.data(), DType::kF32, Shape{2, 3})));
  Result<HostBuffer> owned = HostBuffer::CopyOf(std::as_bytes(std::span<const float>(values)));
  REQUIRE_OK(owned);
  REQUIRE_OK(w.Add("owned", DType::kF32, Shape{3, 2}, std::move(owned).value()));
  REQUIRE_OK(w.WriteFile(dir / "v.safetensors"));
  auto file = SafetensorsFile::Open(dir / "v.safetensors");
  REQUIRE_OK(file);
  for (const char* name : {"view", "owned"}) {
    Result<TensorView> v = (*file)->Get(name);
    REQUIRE_OK(v);
    CHECK(std::memcmp(v->data(), values.data(), 24) == 0);
  }
  CHECK((*file)->Get("owned")->shape() == Shape{3, 2});
}

TEST_CASE("files from other writers: unaligned header, padding and gaps") {
  TempDir dir;
  // An odd-length header, an F16 tensor at data offset 0 (an odd file offset,
  // misaligned for 2-byte elements), a 3-byte gap, a U8 tensor, and an empty I64 tensor at an
  // odd offset. All legal.
  const std::string json =
      R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"u":{"dtype":"U8","shape":[2],)"
      R"("data_offsets":[7,9]},"e":{"dtype":"I64","shape":[0],"data_offsets":[5,5]}})";
  std::vector<std::byte> image = Image(json, 9);
  for (size_t i = 0; i < 9; ++i) image[8 + json.size() + i] = static_cast<std::byte>(i + 1);
  WriteRaw(dir / "x.safetensors", image);
  auto file = SafetensorsFile::Open(dir / "x.safetensors");
  REQUIRE_OK(file);
  CHECK((*file)->tensors().size() == 3);
  const bool aligned = (8 + json.size()) % 2 == 0;
  REQUIRE_FALSE(aligned);
  CheckError((*file)->Get("h").status(), StatusCode::kUnsupported, {"\"h\"", "ReadCopy"});
  Result<HostBuffer> copy = (*file)->ReadCopy("h");
  REQUIRE_OK(copy);
  CHECK(copy->size() == 4);
  CHECK(copy->data()[0] == std::byte{1});
  CHECK(copy->data()[3] == std::byte{4});
  Result<TensorView> u = (*file)->Get("u");  // U8 is always aligned
  REQUIRE_OK(u);
  CHECK(u->data_as<uint8_t>()[0] == 8);
  CHECK(u->data_as<uint8_t>()[1] == 9);
  Result<TensorView> e = (*file)->Get("e");  // empty: nothing to misalign
  REQUIRE_OK(e);
  CHECK(e->NumElements() == 0);
}

TEST_CASE("a rewritten file leaves old mappings intact") {
  TempDir dir;
  const fs::path path = dir / "m.safetensors";
  SafetensorsWriter v1, v2;
  REQUIRE_OK(v1.Add("t", DType::kU8, Shape{1}, std::vector<std::byte>{std::byte{1}}));
  REQUIRE_OK(v2.Add("t", DType::kU8, Shape{1}, std::vector<std::byte>{std::byte{2}}));
  REQUIRE_OK(v1.WriteFile(path));
  auto old_file = SafetensorsFile::Open(path);
  REQUIRE_OK(old_file);
  REQUIRE_OK(v2.WriteFile(path));  // rename replaces the name, not the mapped inode
  CHECK((*(*old_file)->Bytes("t"))[0] == std::byte{1});
  auto new_file = SafetensorsFile::Open(path);
  REQUIRE_OK(new_file);
  CHECK((*(*new_file)->Bytes("t"))[0] == std::byte{2});
  // Nothing but the target is left in the directory: the temporary file was renamed.
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    CHECK(e.path().filename() == "m.safetensors");
    ++entries;
  }
  CHECK(entries == 1);
}

TEST_CASE("a failed write leaves no file behind") {
  TempDir dir;
  SafetensorsWriter w;
  REQUIRE_OK(w.Add("t", DType::kU8, Shape{1}, std::vector<std::byte>(1)));
  const fs::path target = dir / "missing-dir" / "m.safetensors";
  Status s = w.WriteFile(target);
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("missing-dir") != std::string::npos);
  CHECK(fs::is_empty(dir.path()));
}

// ---------------------------------------------------------------------------------------------
// Malformed files: each gives a clear error naming the file (and the tensor where one is
// involved). None crashes; the fuzzer covers the rest.

constexpr const char* kGoodEntry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

TEST_CASE("malformed: the file is shorter than the length field") {
  TempDir dir;
  const fs::path file = dir / "bad.safetensors";
  CheckError(OpenImage(dir, std::vector<std::byte>(5)), StatusCode::kCorruption,
             {file.string(), "5 bytes", "shorter"});
  CheckError(OpenImage(dir, {}), StatusCode::kCorruption, {file.string(), "0 bytes"});
}

TEST_CASE("malformed: header length past the end of the file") {
  TempDir dir;
  const std::string json = std::string("{") + kGoodEntry + "}";
  CheckError(OpenImage(dir, Image(json, 8, json.size() + 9)), StatusCode::kCorruption,
             {(dir / "bad.safetensors").string(), "runs past the end"});
}

TEST_CASE("malformed: huge header length (2^63)") {
  TempDir dir;
  CheckError(OpenImage(dir, Image("{}", 0, uint64_t{1} << 63)), StatusCode::kCorruption,
             {(dir / "bad.safetensors").string(), "9223372036854775808"});
}

TEST_CASE("malformed: a header above the cap is refused before parsing") {
  TempDir dir;
  // A sparse file just large enough to hold the declared header: no real 100 MiB written.
  const fs::path path = dir / "huge.safetensors";
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  std::vector<std::byte> head = Image("", 0, n);
  WriteRaw(path, head);
  fs::resize_file(path, 8 + n + 16);
  CheckError(SafetensorsFile::Open(path).status(), StatusCode::kTooLarge,
             {path.string(), "exceeds the cap"});
}

TEST_CASE("malformed: bad JSON, non-object JSON, duplicate keys, deep nesting") {
  TempDir dir;
  const std::string file = (dir / "bad.safetensors").string();
  CheckError(OpenJson(dir, R"({"a": {"dtype": )", 0), StatusCode::kCorruption,
             {file, "not valid JSON"});
  CheckError(OpenJson(dir, "", 0), StatusCode::kCorruption, {file, "not valid JSON"});
  CheckError(OpenJson(dir, "[1, 2]", 0), StatusCode::kCorruption,
             {file, "not a JSON object", "array"});
  CheckError(OpenJson(dir, "\"text\"", 0), StatusCode::kCorruption, {file, "not a JSON object"});
  CheckError(OpenJson(dir, std::string("{") + kGoodEntry + "," + kGoodEntry + "}", 8),
             StatusCode::kCorruption, {file, "duplicate key \"a\""});
  CheckError(OpenJson(dir, R"({"a":{"dtype":"F32","dtype":"F16"}})", 8), StatusCode::kCorruption,
             {file, "duplicate key \"dtype\""});
  CheckError(OpenJson(dir, R"({"a":{"x":[[[1]]]}})", 0), StatusCode::kCorruption,
             {file, "nested deeper"});
  // A JSON document followed by garbage is not valid either.
  CheckError(OpenJson(dir, "{} x", 0), StatusCode::kCorruption, {file, "not valid JSON"});
}

TEST_CASE("malformed: unknown dtype names the tensor") {
  TempDir dir;
  CheckError(OpenJson(dir, R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
             StatusCode::kUnsupported,
             {(dir / "bad.safetensors").string(), "\"w\"", "unsupported dtype \"F64\""});
  CheckError(OpenJson(dir, R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,8]}})", 8),
             StatusCode::kCorruption, {"\"w\"", "\"dtype\" is not a string"});
}

TEST_CASE("malformed: missing fields name the tensor") {
  TempDir dir;
  const std::string file = (dir / "bad.safetensors").string();
  CheckError(OpenJson(dir, R"({"w":{"dtype":"F32","shape":[2]}})", 8), StatusCode::kCorruption,
             {file, "\"w\"", "missing \"data_offsets\""});
  CheckError(OpenJson(dir, R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8),
             StatusCode::kCorruption, {file, "\"w\"", "missing \"dtype\""});
  CheckError(OpenJson(dir, R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8),
             StatusCode::kCorruption, {file, "\"w\"", "missing \"shape\""});
  CheckError(OpenJson(dir, R"({"w":5})", 0), StatusCode::kCorruption,
             {file, "\"w\"", "not a JSON object"});
  CheckError(OpenJson(dir, R"({"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", 0),
             StatusCode::kCorruption, {file, "empty tensor name"});
}

TEST_CASE("malformed: data_offsets reversed, out of range, or ill-formed") {
  TempDir dir;
  const std::string file = (dir / "bad.safetensors").string();
  CheckError(OpenJson(dir, R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8),
             StatusCode::kCorruption, {file, "\"w\"", "reversed"});
  CheckError(OpenJson(dir, R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}})", 8),
             StatusCode::kCorruption, {file, "\"w\"", "past the data section of 8 bytes"});
  CheckError(OpenJson(dir,
                      R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,)"
                      R"(18446744073709551615]}})",
                      8),
             StatusCode::kCorruption, {file, "\"w\"", "past the data section"});
  CheckError(OpenJson(dir, R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", 8),
             StatusCode::kCorruption, {file, "\"w\"", "data_offsets"});
  CheckError(OpenJson(dir, R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,-4]}})", 8),
             StatusCode::kCorruption, {file, "\"w\"", "data_offsets"});
  CheckError(OpenJson(dir, R"({"w":{"dtype":"U8","shape":[4],"data_offsets":"0-4"}})", 8),
             StatusCode::kCorruption, {file, "\"w\"", "data_offsets"});
}

TEST_CASE("malformed: overlapping tensors name both") {
  TempDir dir;
  CheckError(OpenJson(dir,
                      R"({"first":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("second":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      16),
             StatusCode::kCorruption,
             {(dir / "bad.safetensors").string(), "\"first\"", "\"second\"", "overlaps"});
  // The same range twice is an overlap too; touching ranges and empty tensors are not.
  CheckError(OpenJson(dir,
                      R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                      R"("y":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                      4),
             StatusCode::kCorruption, {"\"x\"", "\"y\"", "overlaps"});
  CHECK_OK(OpenJson(dir,
                    R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                    R"("y":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
                    R"("z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                    8));
}

TEST_CASE("malformed: shape and byte count disagree") {
  TempDir dir;
  CheckError(OpenJson(dir, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
             StatusCode::kCorruption,
             {(dir / "bad.safetensors").string(), "\"w\"", "[3]", "12 bytes", "span 8"});
}

TEST_CASE("malformed: negative, non-integer and ill-typed shapes") {
  TempDir dir;
  const std::string file = (dir / "bad.safetensors").string();
  for (const char* shape : {"[-1]", "[1.5]", "[2.0]", "\"3\"", "[\"2\"]", "[null]", "{}"}) {
    CAPTURE(shape);
    const std::string json =
        std::string(R"({"w":{"dtype":"U8","shape":)") + shape + R"(,"data_offsets":[0,2]}})";
    CheckError(OpenJson(dir, json, 2), StatusCode::kCorruption,
               {file, "\"w\"", "\"shape\" must be an array of non-negative integers"});
  }
}

TEST_CASE("malformed: shape products that overflow") {
  TempDir dir;
  const std::string file = (dir / "bad.safetensors").string();
  CheckError(
      OpenJson(dir, R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
               0),
      StatusCode::kCorruption, {file, "\"w\"", "overflows"});
  // 2^62 elements of 4 bytes: the element count fits, the byte count does not.
  CheckError(OpenJson(dir,
                      R"({"w":{"dtype":"F32","shape":[4611686018427387904],)"
                      R"("data_offsets":[0,0]}})",
                      0),
             StatusCode::kCorruption, {file, "\"w\"", "overflows"});
  CheckError(
      OpenJson(dir, R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})",
               0),
      StatusCode::kCorruption, {file, "\"w\"", "too large"});
  // Beyond 64 bits nlohmann yields a float: still "not a non-negative integer".
  CheckError(
      OpenJson(dir, R"({"w":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,0]}})",
               0),
      StatusCode::kCorruption, {file, "\"w\"", "non-negative integers"});
  // A zero dim wins over huge ones, wherever it is: an empty tensor is fine.
  CHECK_OK(OpenJson(
      dir, R"({"w":{"dtype":"F32","shape":[4294967296,0,4294967296],"data_offsets":[0,0]}})", 0));
  CHECK_OK(OpenJson(
      dir, R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", 0));
}

TEST_CASE("malformed: rank above the maximum") {
  TempDir dir;
  CheckError(
      OpenJson(dir, R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1),
      StatusCode::kUnsupported, {(dir / "bad.safetensors").string(), "\"w\"", "rank 7"});
}

TEST_CASE("malformed: __metadata__ must map strings to strings") {
  TempDir dir;
  const std::string file = (dir / "bad.safetensors").string();
  CheckError(OpenJson(dir, R"({"__metadata__":{"k":1}})", 0), StatusCode::kCorruption,
             {file, "__metadata__", "\"k\"", "not a string"});
  CheckError(OpenJson(dir, R"({"__metadata__":["k"]})", 0), StatusCode::kCorruption,
             {file, "__metadata__", "not a JSON object"});
  CheckError(OpenJson(dir, R"({"__metadata__":{"k":{"x":"y"}}})", 0), StatusCode::kCorruption,
             {file, "\"k\"", "not a string"});
  CHECK_OK(OpenJson(dir, R"({"__metadata__":{"k":"v","format":"pt"}})", 0));
}

TEST_CASE("malformed: missing file and not a regular file") {
  TempDir dir;
  CheckError(SafetensorsFile::Open(dir / "nope.safetensors").status(), StatusCode::kNotFound,
             {(dir / "nope.safetensors").string()});
  CheckError(SafetensorsFile::Open(dir.path()).status(), StatusCode::kIoError,
             {dir.path().string()});
}

TEST_CASE("the span parser never reads past a truncated image") {
  testing::SeededRng rng(3);
  SafetensorsWriter w;
  for (const Expected& e : SampleTensors(rng)) REQUIRE_OK(w.Add(e.name, e.dtype, e.shape, e.bytes));
  Result<std::vector<std::byte>> image = w.Serialize();
  REQUIRE_OK(image);
  // Every prefix is rejected (ASan would catch a read past the end of the heap copy).
  for (size_t n = 0; n < image->size(); ++n) {
    std::vector<std::byte> prefix(image->begin(), image->begin() + static_cast<ptrdiff_t>(n));
    Result<ParsedSafetensorsHeader> parsed = ParseSafetensorsHeader(prefix, "prefix");
    if (parsed.ok()) FAIL_CHECK("prefix of " << n << " bytes parsed");
  }
  CHECK_OK(ParseSafetensorsHeader(*image, "whole"));
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints

TEST_CASE("sharded round trip through the index") {
  TempDir dir;
  testing::SeededRng rng(2);
  const std::vector<Expected> expected = SampleTensors(rng);
  SafetensorsWriter w;
  for (const Expected& e : expected) REQUIRE_OK(w.Add(e.name, e.dtype, e.shape, e.bytes));
  w.SetMetadata("format", "pt");
  Result<std::vector<std::string>> shards = w.WriteSharded(dir / "ckpt", 200);
  REQUIRE_OK(shards);
  REQUIRE(shards->size() >= 3);
  CHECK(shards->front() == fmt::format("model-00001-of-{:05d}.safetensors", shards->size()));

  // The index says which shard holds what, and the total data size.
  std::ifstream in(dir / "ckpt" / kSafetensorsIndexFileName);
  nlohmann::json index = nlohmann::json::parse(in);
  CHECK(index["metadata"]["total_size"].get<uint64_t>() == w.DataBytes());
  CHECK(index["weight_map"].size() == expected.size());

  for (const fs::path& p : {dir / "ckpt", dir / "ckpt" / kSafetensorsIndexFileName}) {
    CAPTURE(p);
    Result<std::shared_ptr<const SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::Open(p);
    REQUIRE_OK(ckpt);
    CHECK((*ckpt)->shards().size() == shards->size());
    CHECK((*ckpt)->size() == expected.size());
    std::vector<std::string> names = (*ckpt)->TensorNames();
    CHECK(std::is_sorted(names.begin(), names.end()));
    CHECK(names.size() == expected.size());
    for (const auto& shard : (*ckpt)->shards()) {
      uint64_t bytes = 0;
      for (const auto& [name, info] : shard->tensors()) bytes += info.size();
      // At most 200 bytes, unless one tensor larger than that has the shard to itself.
      CHECK((bytes <= 200 || shard->tensors().size() == 1));
      CHECK(shard->metadata().at("format") == "pt");
    }
    for (const Expected& e : expected) {
      CAPTURE(e.name);
      Result<const SafetensorsFile*> shard = (*ckpt)->ShardOf(e.name);
      REQUIRE_OK(shard);
      CHECK((*shard)->path().filename().string() == index["weight_map"][e.name].get<std::string>());
      Result<TensorView> v = (*ckpt)->Get(e.name);
      REQUIRE_OK(v);
      CHECK(v->shape() == e.shape);
      CHECK(v->dtype() == e.dtype);
      if (!e.bytes.empty()) CHECK(std::memcmp(v->data(), e.bytes.data(), e.bytes.size()) == 0);
      Result<HostBuffer> copy = (*ckpt)->ReadCopy(e.name);
      REQUIRE_OK(copy);
      CHECK(SameBytes(copy->span(), e.bytes));
      CHECK((*ckpt)->Info(e.name).ok());
    }
    CheckError((*ckpt)->Get("absent").status(), StatusCode::kNotFound, {"absent", p.string()});
  }
}

TEST_CASE("checkpoint: a single file, a directory with model.safetensors, an empty directory") {
  TempDir dir;
  SafetensorsWriter w;
  REQUIRE_OK(w.Add("t", DType::kI32, Shape{2}, std::vector<std::byte>(8, std::byte{9})));
  REQUIRE_OK(w.WriteFile(dir / kSafetensorsFileName));
  for (const fs::path& p : {dir.path(), dir / kSafetensorsFileName}) {
    Result<std::shared_ptr<const SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::Open(p);
    REQUIRE_OK(ckpt);
    CHECK((*ckpt)->shards().size() == 1);
    CHECK((*ckpt)->TensorNames() == std::vector<std::string>{"t"});
    CHECK((*ckpt)->Get("t")->data_as<int32_t>()[1] == 0x09090909);
  }
  TempDir empty;
  CheckError(SafetensorsCheckpoint::Open(empty.path()).status(), StatusCode::kNotFound,
             {empty.path().string(), "model.safetensors"});
}

// Writes shard files holding the given tensor names (U8, one byte each) and an index text.
void WriteShard(const TempDir& dir, const std::string& file,
                std::initializer_list<const char*> names) {
  SafetensorsWriter w;
  for (const char* n : names) REQUIRE_OK(w.Add(n, DType::kU8, Shape{1}, std::vector<std::byte>(1)));
  REQUIRE_OK(w.WriteFile(dir / file));
}

Status OpenIndex(const TempDir& dir, std::string_view index_json) {
  WriteText(dir / kSafetensorsIndexFileName, index_json);
  return SafetensorsCheckpoint::Open(dir.path()).status();
}

TEST_CASE("bad index: missing shard, traversal, missing or doubled tensors") {
  TempDir dir;
  const std::string index = (dir / kSafetensorsIndexFileName).string();
  WriteShard(dir, "s1.safetensors", {"a", "b"});
  WriteShard(dir, "s2.safetensors", {"b", "c"});
  CHECK_OK(OpenIndex(dir, R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})"));

  CheckError(OpenIndex(dir, R"({"weight_map":{"a":"s1.safetensors","x":"gone.safetensors"}})"),
             StatusCode::kNotFound, {index, "gone.safetensors", "\"x\""});
  for (const char* shard : {"../s1.safetensors", "sub/s1.safetensors", "..", "", "a\\\\b"}) {
    CAPTURE(shard);
    CheckError(OpenIndex(dir, std::string(R"({"weight_map":{"a":")") + shard + "\"}}"),
               StatusCode::kCorruption, {index, "\"a\"", "not a plain file name"});
  }
  CheckError(OpenIndex(dir, R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors",)"
                            R"("z":"s1.safetensors"}})"),
             StatusCode::kCorruption, {index, "\"z\"", "s1.safetensors", "lacks it"});
  // "b" is in both shards.
  CheckError(OpenIndex(dir, R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors",)"
                            R"("c":"s2.safetensors"}})"),
             StatusCode::kCorruption, {index, "\"b\"", "appears in shards"});
  // "b" of s1 is in no map entry.
  CheckError(OpenIndex(dir, R"({"weight_map":{"a":"s1.safetensors"}})"), StatusCode::kCorruption,
             {index, "\"b\"", "not in the weight_map"});
}

TEST_CASE("bad index: structure") {
  TempDir dir;
  const std::string index = (dir / kSafetensorsIndexFileName).string();
  WriteShard(dir, "s1.safetensors", {"a"});
  CheckError(OpenIndex(dir, "{"), StatusCode::kCorruption, {index, "not valid JSON"});
  CheckError(OpenIndex(dir, "[]"), StatusCode::kCorruption, {index, "not a JSON object"});
  CheckError(OpenIndex(dir, R"({"metadata":{}})"), StatusCode::kCorruption, {index, "weight_map"});
  CheckError(OpenIndex(dir, R"({"weight_map":["a"]})"), StatusCode::kCorruption,
             {index, "weight_map"});
  CheckError(OpenIndex(dir, R"({"metadata":7,"weight_map":{"a":"s1.safetensors"}})"),
             StatusCode::kCorruption, {index, "\"metadata\""});
  CheckError(OpenIndex(dir, R"({"weight_map":{"a":3}})"), StatusCode::kCorruption,
             {index, "\"a\"", "not a string"});
  CheckError(OpenIndex(dir, R"({"weight_map":{"a":"s1.safetensors","a":"s1.safetensors"}})"),
             StatusCode::kCorruption, {index, "duplicate key \"a\""});
  // HF's index shape, with a numeric total_size, is accepted.
  CHECK_OK(OpenIndex(dir, R"({"metadata":{"total_size":1},"weight_map":{"a":"s1.safetensors"}})"));
}

TEST_CASE("a shard that is itself corrupt is reported with the index and the shard") {
  TempDir dir;
  WriteRaw(dir / "s1.safetensors",
           Image(R"({"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}})", 1));
  CheckError(OpenIndex(dir, R"({"weight_map":{"a":"s1.safetensors"}})"), StatusCode::kCorruption,
             {(dir / kSafetensorsIndexFileName).string(), (dir / "s1.safetensors").string(),
              "\"a\"", "past the data section"});
}

TEST_CASE("WriteSafetensorsIndex refuses unsafe shard names") {
  TempDir dir;
  CheckError(WriteSafetensorsIndex(dir / "i.json", {{"a", "../evil.safetensors"}}, 1),
             StatusCode::kBadRequest, {"\"a\"", "../evil.safetensors"});
  CHECK(fs::is_empty(dir.path()));
}

}  // namespace
}  // namespace hypic
