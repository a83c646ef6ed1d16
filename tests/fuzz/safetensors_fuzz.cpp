// Fuzz target: ParseSafetensorsHeader and ParseSafetensorsIndex on arbitrary bytes. Invariants
// checked beyond "no crash, no leak, no UB": every tensor the parser accepts lies inside the
// input (its bytes are read, so ASan sees any overrun), the writer accepts everything the
// reader accepts, and re-serializing then re-parsing gives the same tensors and metadata.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "core/safetensors.h"

namespace {

void Check(bool cond) {
  if (!cond) std::abort();
}

void RoundTrip(std::span<const std::byte> in, const hypic::ParsedSafetensorsHeader& parsed) {
  Check(parsed.data_offset + parsed.data_bytes == in.size());
  hypic::SafetensorsWriter writer;
  for (const auto& [name, info] : parsed.tensors) {
    Check(info.begin <= info.end && info.end <= parsed.data_bytes);
    std::span<const std::byte> bytes = in.subspan(parsed.data_offset + info.begin, info.size());
    Check(writer.Add(name, info.dtype, info.shape, bytes).ok());
  }
  for (const auto& [key, value] : parsed.metadata) writer.SetMetadata(key, value);
  hypic::Result<std::vector<std::byte>> image = writer.Serialize();
  Check(image.ok());
  hypic::Result<hypic::ParsedSafetensorsHeader> again =
      hypic::ParseSafetensorsHeader(*image, "fuzz-rewrite");
  Check(again.ok());
  Check(again->metadata == parsed.metadata);
  Check(again->tensors.size() == parsed.tensors.size());
  for (const auto& [name, info] : parsed.tensors) {
    auto it = again->tensors.find(name);
    Check(it != again->tensors.end());
    Check(it->second.dtype == info.dtype && it->second.shape == info.shape &&
          it->second.size() == info.size());
    if (info.size() > 0) {
      Check(std::memcmp(image->data() + again->data_offset + it->second.begin,
                        in.data() + parsed.data_offset + info.begin, info.size()) == 0);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  hypic::Result<hypic::ParsedSafetensorsHeader> parsed = hypic::ParseSafetensorsHeader(in, "fuzz");
  if (parsed.ok()) RoundTrip(in, *parsed);
  // The same bytes as an index file: only "no crash" and plain shard names can be checked.
  hypic::Result<std::map<std::string, std::string>> index = hypic::ParseSafetensorsIndex(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (index.ok()) {
    for (const auto& [tensor, shard] : *index) {
      Check(!shard.empty() && shard.find('/') == std::string::npos &&
            shard.find("..") == std::string::npos);
    }
  }
  return 0;
}
